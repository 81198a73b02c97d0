// Errors in later chunks of a --split-input-file input carry the line numbers of this file, the
// same ones the unsplit file reports; every chunk is checked, each failing one reported.
// RUN: not uniorch-opt %s --split-input-file 2>&1 | FileCheck %s
// RUN: not uniorch-opt %s --split-input-file -p uniorch-verify-linalg 2>&1 | FileCheck %s --check-prefixes=CHECK,PASS
// RUN: not uniorch-opt %s 2>&1 | FileCheck %s --check-prefix=WHOLE
// As mlir-opt, the chunks that go through are printed beside the failing ones' diagnostics.
// RUN: not uniorch-opt %s --split-input-file 2>/dev/null | FileCheck %s --check-prefix=OUT

// CHECK-NOT: Traceback
// WHOLE-NOT: Traceback
func.func @ok(%a: tensor<4xf32>) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}

// -----

// CHECK: {{.*}}split-errors.mlir:[[# @LINE + 4]]:25: error: expected ':'
// WHOLE: {{.*}}split-errors.mlir:[[# @LINE + 3]]:25: error: expected ':'
// WHOLE-NOT: error
func.func @malformed(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.addf %a, %a tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// CHECK: {{.*}}split-errors.mlir:[[# @LINE + 3]]:3: error: type of return operand 0 ('tensor<4xf32>') doesn't match function result type ('tensor<8xf32>') in function @invalid
// CHECK-NEXT: {{.*}}split-errors.mlir:[[# @LINE + 2]]:3: note: see current operation
func.func @invalid(%a: tensor<4xf32>) -> tensor<8xf32> {
  return %a : tensor<4xf32>
}

// -----

// Valid MLIR, but not the linalg-on-tensors graph: uniorch-verify-linalg points at the op.
// PASS: {{.*}}split-errors.mlir:[[# @LINE + 2]]:8: error: 'torch.aten.relu' is not part of the linalg-on-tensors graph
func.func @torch_left(%a: !torch.vtensor<[4],f32>) -> !torch.vtensor<[4],f32> {
  %0 = torch.aten.relu %a : !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32>
  return %0 : !torch.vtensor<[4],f32>
}
// CHECK-NOT: error
// CHECK-NOT: Traceback

// OUT: func.func @ok(
// OUT-NEXT: return
// OUT: // -----
// OUT: // -----
// OUT: // -----
// OUT-NEXT: module {
// OUT-NEXT: func.func @torch_left(
// OUT-NOT: // -----
