// A transpose is pure data movement: it joins its consumer's kernel (read through its indexing).
// RUN: uniorch-opt %s -p 'uniorch-fuse' | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: %[[T:.*]] = linalg.generic {{.*}} ins(%arg0 : tensor<8x12xf32>) {{.*}}uniorch.domain = {parallel = [12, 8], reduction = []}, uniorch.group = 0 : i64, uniorch.kind = "pointwise"
// CHECK: %[[OUT:.*]] = linalg.generic {{.*}} ins(%[[T]], %arg1 {{.*}}uniorch.group = 0 : i64
// CHECK-NOT: uniorch.group = 1
// CHECK: return %[[OUT]]

#map = affine_map<(d0, d1) -> (d1, d0)>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
module {
  func.func @main(%arg0: tensor<8x12xf32>, %arg1: tensor<12x8xf32>) -> tensor<12x8xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 2.000000e+00 : f32
    %0 = tensor.empty() : tensor<12x8xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<8x12xf32>) outs(%0 : tensor<12x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<12x8xf32>
    %2 = linalg.generic {indexing_maps = [#map1, #map1, #map1], iterator_types = ["parallel", "parallel"]} ins(%1, %arg1 : tensor<12x8xf32>, tensor<12x8xf32>) outs(%0 : tensor<12x8xf32>) {
    ^bb0(%in: f32, %in_1: f32, %out: f32):
      %3 = arith.mulf %in, %cst_0 : f32
      %4 = arith.addf %3, %in_1 : f32
      %5 = arith.cmpf ugt, %4, %cst : f32
      %6 = arith.select %5, %4, %cst : f32
      linalg.yield %6 : f32
    } -> tensor<12x8xf32>
    return %2 : tensor<12x8xf32>
  }
}
