// torch.arange(0, 1, 0.1): the step is a float64 constant truncated to float32 in @main, which MLIR
// does not fold (it loses bits); the kernel then took it as a scalar f32 argument, which codegen
// refuses, and the arange ran in PyTorch. uniorch-preprocess folds the cast to an f32 constant of
// the nearest value, which fusion moves into the kernel body.
// RUN: uniorch-opt %s -p uniorch-preprocess | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK-NOT: arith.truncf
// CHECK: arith.constant 1.000000e-01 : f32
// CHECK: linalg.generic
// CHECK: arith.mulf
#map = affine_map<(d0, d1) -> (d0, d1)>
module attributes {uniorch.inputs = ["user:0"]} {
  func.func @main(%arg0: tensor<3x10xf32>) -> tensor<3x10xf32> {
    %cst = arith.constant 1.000000e-01 : f64
    %0 = arith.truncf %cst : f64 to f32
    %1 = tensor.empty() : tensor<3x10xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<3x10xf32>) outs(%1 : tensor<3x10xf32>) {
    ^bb0(%in: f32, %out: f32):
      %3 = linalg.index 1 : index
      %4 = arith.index_cast %3 : index to i64
      %5 = arith.sitofp %4 : i64 to f32
      %6 = arith.mulf %0, %5 : f32
      %7 = arith.addf %in, %6 : f32
      linalg.yield %7 : f32
    } -> tensor<3x10xf32>
    return %2 : tensor<3x10xf32>
  }
}
