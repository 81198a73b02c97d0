// arith and math ops on whole tensors, as MLIR written by hand: uniorch-preprocess makes them
// linalg.generic, so a kernel computes them (they were left in @main, and --emit triton printed
// nothing at all).
// RUN: uniorch-opt %s -p uniorch-preprocess | FileCheck %s
// RUN: uniorch-opt %s --emit triton --target cuda:sm_90 | FileCheck %s --check-prefix=TRITON

// CHECK-LABEL: func.func @main
// CHECK: linalg.generic
// CHECK: arith.addf
// CHECK: math.exp
// CHECK-NOT: arith.addf {{.*}} : tensor
// TRITON: @jit
// TRITON: tl.store
func.func @main(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = arith.addf %a, %b : tensor<4x8xf32>
  %1 = math.exp %0 : tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}
