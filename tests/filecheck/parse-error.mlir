// Malformed MLIR: one mlir-opt style diagnostic, file:line:col of the input, exit 1, no traceback.
// RUN: not uniorch-opt %s 2>&1 | FileCheck %s
// RUN: not uniorch-opt - < %s 2>&1 | FileCheck %s --check-prefix=STDIN

// CHECK-NOT: Traceback
// CHECK: {{.*}}parse-error.mlir:[[# @LINE + 6]]:25: error: expected ':'
// CHECK-NOT: Traceback
// STDIN-NOT: Traceback
// STDIN: <stdin>:[[# @LINE + 3]]:25: error: expected ':'
// STDIN-NOT: Traceback
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.addf %a, %a tensor<4xf32>
  return %0 : tensor<4xf32>
}
