// cumsum along dim 1: the scan is a kernel of its own ("scan"), and the fills of its output and
// accumulator join it instead of running as pointwise kernels.
// RUN: uniorch-opt %s -p 'uniorch-fuse' | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: linalg.generic {{.*}}uniorch.group = 0 : i64
// CHECK: linalg.generic {{.*}}uniorch.group = 0 : i64
// CHECK: tm_tensor.scan dimension(1) inclusive(true) {{.*}}uniorch.domain = {parallel = [4], reduction = [33]}, uniorch.group = 0 : i64, uniorch.kind = "scan"
// CHECK-NOT: uniorch.group = 1

#map = affine_map<(d0, d1) -> ()>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
#map2 = affine_map<(d0) -> ()>
#map3 = affine_map<(d0) -> (d0)>
module attributes {uniorch.inputs = ["user:0"], uniorch.model = "factory.<locals>.<lambda>"} {
  func.func @main(%arg0: tensor<4x33xf32>) -> tensor<4x33xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<4x33xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel"]} ins(%cst : f32) outs(%0 : tensor<4x33xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<4x33xf32>
    %2 = tensor.empty() : tensor<4xf32>
    %3 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel"]} ins(%cst : f32) outs(%2 : tensor<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<4xf32>
    %4:2 = tm_tensor.scan dimension(1) inclusive(true) ins(%arg0 : tensor<4x33xf32>) outs(%1, %3 : tensor<4x33xf32>, tensor<4xf32>) {
    ^bb0(%arg1: f32, %arg2: f32):
      %5 = arith.addf %arg1, %arg2 : f32
      tm_tensor.yield %5 : f32
    } -> tensor<4x33xf32>, tensor<4xf32>
    return %4#0 : tensor<4x33xf32>
  }
}
