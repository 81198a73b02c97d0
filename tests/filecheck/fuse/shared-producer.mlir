// exp(x) feeds a sum and a multiply: not cheap, so it is not duplicated into the reduction's
// kernel; it stays with its pointwise consumer, whose kernel stores both.
// RUN: uniorch-opt %s -p 'uniorch-fuse' | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: %[[EXP:.*]] = linalg.generic {{.*}}uniorch.domain = {parallel = [4, 16], reduction = []}, uniorch.group = 0 : i64, uniorch.kind = "pointwise"
// CHECK: math.exp
// CHECK: linalg.generic {{.*}}uniorch.group = 1 : i64
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} ins(%[[EXP]] {{.*}}uniorch.domain = {parallel = [4], reduction = [16]}, uniorch.group = 1 : i64, uniorch.kind = "reduction"
// CHECK: %[[MUL:.*]] = linalg.generic {{.*}} ins(%[[EXP]] {{.*}}uniorch.group = 0 : i64
// CHECK: return %[[SUM]], %[[MUL]]

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0) -> ()>
#map2 = affine_map<(d0) -> (d0)>
#map3 = affine_map<(d0, d1) -> (d0)>
module {
  func.func @main(%arg0: tensor<4x16xf32>) -> (tensor<4xf32>, tensor<4x16xf32>) {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 3.000000e+00 : f32
    %0 = tensor.empty() : tensor<4x16xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<4x16xf32>) outs(%0 : tensor<4x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %6 = math.exp %in : f32
      linalg.yield %6 : f32
    } -> tensor<4x16xf32>
    %2 = tensor.empty() : tensor<4xf32>
    %3 = linalg.generic {indexing_maps = [#map1, #map2], iterator_types = ["parallel"]} ins(%cst : f32) outs(%2 : tensor<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<4xf32>
    %4 = linalg.generic {indexing_maps = [#map, #map3], iterator_types = ["parallel", "reduction"]} ins(%1 : tensor<4x16xf32>) outs(%3 : tensor<4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %6 = arith.addf %in, %out : f32
      linalg.yield %6 : f32
    } -> tensor<4xf32>
    %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%1 : tensor<4x16xf32>) outs(%0 : tensor<4x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %6 = arith.mulf %in, %cst_0 : f32
      linalg.yield %6 : f32
    } -> tensor<4x16xf32>
    return %4, %5 : tensor<4xf32>, tensor<4x16xf32>
  }
}
