// Linear + GELU: transposed weight, zero fill, matmul, bias + GELU epilogue: one contraction kernel.
// RUN: uniorch-opt %s -p 'uniorch-fuse' | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: %[[WT:.*]] = linalg.generic {{.*}} ins(%arg1 : tensor<16x32xf32>) {{.*}}uniorch.group = 0 : i64
// CHECK: %[[ZERO:.*]] = linalg.generic {{.*}}uniorch.group = 0 : i64
// CHECK: %[[MM:.*]] = linalg.generic {{.*}} ins(%arg0, %[[WT]] {{.*}} outs(%[[ZERO]] {{.*}}uniorch.domain = {parallel = [4, 16], reduction = [32]}, uniorch.group = 0 : i64, uniorch.kind = "contraction"
// CHECK: %[[EPI:.*]] = linalg.generic {{.*}} ins(%[[MM]], %arg2 {{.*}}uniorch.group = 0 : i64
// CHECK: math.erf
// CHECK-NOT: uniorch.group = 1
// CHECK: return %[[EPI]]

#map = affine_map<(d0, d1) -> (d1, d0)>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
#map2 = affine_map<(d0, d1) -> ()>
#map3 = affine_map<(d0, d1, d2) -> (d0, d2)>
#map4 = affine_map<(d0, d1, d2) -> (d2, d1)>
#map5 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map6 = affine_map<(d0, d1) -> (d1)>
module {
  func.func @main(%arg0: tensor<4x32xf32>, %arg1: tensor<16x32xf32>, %arg2: tensor<16xf32>) -> tensor<4x16xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 1.000000e+00 : f32
    %cst_1 = arith.constant 5.000000e-01 : f32
    %cst_2 = arith.constant 1.41421354 : f32
    %0 = tensor.empty() : tensor<32x16xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel"]} ins(%arg1 : tensor<16x32xf32>) outs(%0 : tensor<32x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<32x16xf32>
    %2 = tensor.empty() : tensor<4x16xf32>
    %3 = linalg.generic {indexing_maps = [#map2, #map1], iterator_types = ["parallel", "parallel"]} ins(%cst : f32) outs(%2 : tensor<4x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<4x16xf32>
    %4 = linalg.generic {indexing_maps = [#map3, #map4, #map5], iterator_types = ["parallel", "parallel", "reduction"]} ins(%arg0, %1 : tensor<4x32xf32>, tensor<32x16xf32>) outs(%3 : tensor<4x16xf32>) {
    ^bb0(%in: f32, %in_3: f32, %out: f32):
      %6 = arith.mulf %in, %in_3 : f32
      %7 = arith.addf %out, %6 : f32
      linalg.yield %7 : f32
    } -> tensor<4x16xf32>
    %5 = linalg.generic {indexing_maps = [#map1, #map6, #map1], iterator_types = ["parallel", "parallel"]} ins(%4, %arg2 : tensor<4x16xf32>, tensor<16xf32>) outs(%2 : tensor<4x16xf32>) {
    ^bb0(%in: f32, %in_3: f32, %out: f32):
      %6 = arith.addf %in, %in_3 : f32
      %7 = arith.divf %6, %cst_2 : f32
      %8 = math.erf %7 : f32
      %9 = arith.addf %8, %cst_0 : f32
      %10 = arith.mulf %9, %cst_1 : f32
      %11 = arith.mulf %6, %10 : f32
      linalg.yield %11 : f32
    } -> tensor<4x16xf32>
    return %5 : tensor<4x16xf32>
  }
}
