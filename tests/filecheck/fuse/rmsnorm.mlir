// RMSNorm: x * rsqrt(mean(x^2) + eps) * w is one reduction kernel.
// RUN: uniorch-opt %s -p 'uniorch-fuse' | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: %[[FILL:.*]] = linalg.generic {{.*}}uniorch.group = 0 : i64
// CHECK: %[[SQ:.*]] = linalg.generic {{.*}} outs(%[[FILL]] {{.*}}uniorch.domain = {parallel = [4], reduction = [32]}, uniorch.group = 0 : i64, uniorch.kind = "reduction"
// CHECK: math.fpowi
// CHECK: %[[OUT:.*]] = linalg.generic {{.*}} ins(%arg0, %[[SQ]], %arg1 {{.*}}uniorch.group = 0 : i64
// CHECK: math.rsqrt
// CHECK-NOT: uniorch.group = 1
// CHECK: return %[[OUT]]

#map = affine_map<(d0, d1) -> ()>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
#map2 = affine_map<(d0, d1) -> (d0, 0)>
#map3 = affine_map<(d0, d1) -> (d1)>
module {
  func.func @main(%arg0: tensor<4x32xf32>, %arg1: tensor<32xf32>) -> tensor<4x32xf32> {
    %c2_i64 = arith.constant 2 : i64
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 9.9999999999999995E-7 : f64
    %cst_1 = arith.constant 3.200000e+01 : f32
    %0 = tensor.empty() : tensor<4x32xf32>
    %1 = tensor.empty() : tensor<4x1xf32>
    %2 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel"]} ins(%cst : f32) outs(%1 : tensor<4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<4x1xf32>
    %3 = linalg.generic {indexing_maps = [#map1, #map2], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x32xf32>) outs(%2 : tensor<4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %5 = math.fpowi %in, %c2_i64 : f32, i64
      %6 = arith.addf %5, %out : f32
      linalg.yield %6 : f32
    } -> tensor<4x1xf32>
    %4 = linalg.generic {indexing_maps = [#map1, #map2, #map3, #map1], iterator_types = ["parallel", "parallel"]} ins(%arg0, %3, %arg1 : tensor<4x32xf32>, tensor<4x1xf32>, tensor<32xf32>) outs(%0 : tensor<4x32xf32>) {
    ^bb0(%in: f32, %in_2: f32, %in_3: f32, %out: f32):
      %5 = arith.divf %in_2, %cst_1 : f32
      %6 = arith.truncf %cst_0 : f64 to f32
      %7 = arith.addf %5, %6 : f32
      %8 = math.rsqrt %7 : f32
      %9 = arith.mulf %in, %8 : f32
      %10 = arith.mulf %9, %in_3 : f32
      linalg.yield %10 : f32
    } -> tensor<4x32xf32>
    return %4 : tensor<4x32xf32>
  }
}
