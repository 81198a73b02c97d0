// Softmax (max, exp, sum, divide; fills of both accumulators): one reduction kernel.
// RUN: uniorch-opt %s -p 'uniorch-fuse' | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: %[[FILL:.*]] = linalg.generic {{.*}} ins(%{{.*}} : f32) {{.*}}uniorch.group = 0 : i64
// CHECK: %[[VIEW:.*]] = tensor.expand_shape %arg0 {{.*}} into tensor<6x1x40xf32>{{$}}
// CHECK: %[[MAX:.*]] = linalg.generic {{.*}} ins(%[[VIEW]] {{.*}} outs(%[[FILL]] {{.*}} {uniorch.domain = {parallel = [6], reduction = [40]}, uniorch.group = 0 : i64, uniorch.kind = "reduction"}
// CHECK: arith.maximumf
// CHECK: %[[EXP:.*]] = linalg.generic {{.*}} ins(%arg0, %[[MAX]] {{.*}}uniorch.group = 0 : i64
// CHECK: math.exp
// CHECK: linalg.generic {{.*}}uniorch.group = 0 : i64
// CHECK: %[[SUM:.*]] = linalg.generic {{.*}} ins(%[[EXP]] {{.*}}uniorch.group = 0 : i64
// CHECK: arith.addf
// CHECK: %[[DIV:.*]] = linalg.generic {{.*}} ins(%[[EXP]], %[[SUM]] {{.*}}uniorch.group = 0 : i64
// CHECK: arith.divf
// CHECK-NOT: uniorch.group = 1
// CHECK: return %[[DIV]]

#map = affine_map<(d0, d1) -> ()>
#map1 = affine_map<(d0, d1) -> (d0, d1)>
#map2 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map3 = affine_map<(d0, d1, d2) -> (d0, d1)>
#map4 = affine_map<(d0, d1) -> (d0, 0)>
module {
  func.func @main(%arg0: tensor<6x40xf32>) -> tensor<6x40xf32> {
    %cst = arith.constant 0xFF800000 : f32
    %cst_0 = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<6xf32>
    %expanded = tensor.expand_shape %0 [[0, 1]] output_shape [6, 1] : tensor<6xf32> into tensor<6x1xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel"]} ins(%cst : f32) outs(%expanded : tensor<6x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<6x1xf32>
    %expanded_1 = tensor.expand_shape %arg0 [[0, 1], [2]] output_shape [6, 1, 40] : tensor<6x40xf32> into tensor<6x1x40xf32>
    %2 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["parallel", "parallel", "reduction"]} ins(%expanded_1 : tensor<6x1x40xf32>) outs(%1 : tensor<6x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %9 = arith.maximumf %in, %out : f32
      linalg.yield %9 : f32
    } -> tensor<6x1xf32>
    %3 = tensor.empty() : tensor<6x40xf32>
    %4 = linalg.generic {indexing_maps = [#map1, #map4, #map1], iterator_types = ["parallel", "parallel"]} ins(%arg0, %2 : tensor<6x40xf32>, tensor<6x1xf32>) outs(%3 : tensor<6x40xf32>) {
    ^bb0(%in: f32, %in_2: f32, %out: f32):
      %9 = arith.subf %in, %in_2 : f32
      %10 = math.exp %9 : f32
      linalg.yield %10 : f32
    } -> tensor<6x40xf32>
    %5 = tensor.empty() : tensor<6x1xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map1], iterator_types = ["parallel", "parallel"]} ins(%cst_0 : f32) outs(%5 : tensor<6x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<6x1xf32>
    %7 = linalg.generic {indexing_maps = [#map1, #map4], iterator_types = ["parallel", "reduction"]} ins(%4 : tensor<6x40xf32>) outs(%6 : tensor<6x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %9 = arith.addf %in, %out : f32
      linalg.yield %9 : f32
    } -> tensor<6x1xf32>
    %8 = linalg.generic {indexing_maps = [#map1, #map4, #map1], iterator_types = ["parallel", "parallel"]} ins(%4, %7 : tensor<6x40xf32>, tensor<6x1xf32>) outs(%3 : tensor<6x40xf32>) {
    ^bb0(%in: f32, %in_2: f32, %out: f32):
      %9 = arith.divf %in, %in_2 : f32
      linalg.yield %9 : f32
    } -> tensor<6x40xf32>
    return %8 : tensor<6x40xf32>
  }
}
