// LayerNorm (f64 mean and variance, f32 mean, normalise + affine): one reduction kernel with
// three reductions over the same rows.
// RUN: uniorch-opt %s -p 'uniorch-fuse' | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: %[[EXT:.*]] = linalg.generic {{.*}}uniorch.group = 0 : i64
// CHECK: arith.extf
// CHECK: linalg.generic {{.*}}uniorch.group = 0 : i64
// CHECK: %[[MEAN:.*]] = linalg.generic {{.*}} ins(%[[EXT]] {{.*}}uniorch.domain = {parallel = [4], reduction = [32]}, uniorch.group = 0 : i64, uniorch.kind = "reduction"
// CHECK: %[[VAR:.*]] = linalg.generic {{.*}} ins(%[[EXT]], %[[MEAN]] {{.*}}uniorch.group = 0 : i64
// CHECK: linalg.generic {{.*}}uniorch.group = 0 : i64
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} ins(%arg0 {{.*}}uniorch.group = 0 : i64
// CHECK: %[[OUT:.*]] = linalg.generic {{.*}} ins(%arg0, %[[SUM]], %[[VAR]], %arg1, %arg2 {{.*}}uniorch.group = 0 : i64
// CHECK: math.rsqrt
// CHECK-NOT: uniorch.group = 1
// CHECK: return %[[OUT]]

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> ()>
#map2 = affine_map<(d0, d1) -> (d0, 0)>
#map3 = affine_map<(d0, d1) -> (d1)>
module {
  func.func @main(%arg0: tensor<4x32xf32>, %arg1: tensor<32xf32>, %arg2: tensor<32xf32>) -> tensor<4x32xf32> {
    %cst = arith.constant 0.000000e+00 : f64
    %cst_0 = arith.constant 0.000000e+00 : f32
    %cst_1 = arith.constant 1.000000e-05 : f64
    %cst_2 = arith.constant 3.200000e+01 : f64
    %cst_3 = arith.constant 3.200000e+01 : f32
    %0 = tensor.empty() : tensor<4x32xf64>
    %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<4x32xf32>) outs(%0 : tensor<4x32xf64>) {
    ^bb0(%in: f32, %out: f64):
      %11 = arith.extf %in : f32 to f64
      linalg.yield %11 : f64
    } -> tensor<4x32xf64>
    %2 = tensor.empty() : tensor<4x1xf64>
    %3 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel", "parallel"]} ins(%cst : f64) outs(%2 : tensor<4x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      linalg.yield %in : f64
    } -> tensor<4x1xf64>
    %4 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%1 : tensor<4x32xf64>) outs(%3 : tensor<4x1xf64>) {
    ^bb0(%in: f64, %out: f64):
      %11 = arith.addf %in, %out : f64
      linalg.yield %11 : f64
    } -> tensor<4x1xf64>
    %5 = linalg.generic {indexing_maps = [#map, #map2, #map2], iterator_types = ["parallel", "reduction"]} ins(%1, %4 : tensor<4x32xf64>, tensor<4x1xf64>) outs(%3 : tensor<4x1xf64>) {
    ^bb0(%in: f64, %in_4: f64, %out: f64):
      %11 = arith.divf %in_4, %cst_2 : f64
      %12 = arith.subf %in, %11 : f64
      %13 = arith.mulf %12, %12 : f64
      %14 = arith.addf %13, %out : f64
      linalg.yield %14 : f64
    } -> tensor<4x1xf64>
    %6 = tensor.empty() : tensor<4x1xf32>
    %7 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel", "parallel"]} ins(%cst_0 : f32) outs(%6 : tensor<4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<4x1xf32>
    %8 = linalg.generic {indexing_maps = [#map, #map2], iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x32xf32>) outs(%7 : tensor<4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %11 = arith.addf %in, %out : f32
      linalg.yield %11 : f32
    } -> tensor<4x1xf32>
    %9 = tensor.empty() : tensor<4x32xf32>
    %10 = linalg.generic {indexing_maps = [#map, #map2, #map2, #map3, #map3, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0, %8, %5, %arg1, %arg2 : tensor<4x32xf32>, tensor<4x1xf32>, tensor<4x1xf64>, tensor<32xf32>, tensor<32xf32>) outs(%9 : tensor<4x32xf32>) {
    ^bb0(%in: f32, %in_4: f32, %in_5: f64, %in_6: f32, %in_7: f32, %out: f32):
      %11 = arith.divf %in_5, %cst_2 : f64
      %12 = arith.truncf %11 : f64 to f32
      %13 = arith.truncf %cst_1 : f64 to f32
      %14 = arith.addf %12, %13 : f32
      %15 = math.rsqrt %14 : f32
      %16 = arith.divf %in_4, %cst_3 : f32
      %17 = arith.subf %in, %16 : f32
      %18 = arith.mulf %17, %15 : f32
      %19 = arith.mulf %18, %in_6 : f32
      %20 = arith.addf %19, %in_7 : f32
      linalg.yield %20 : f32
    } -> tensor<4x32xf32>
    return %10 : tensor<4x32xf32>
  }
}
