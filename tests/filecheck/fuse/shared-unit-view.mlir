// softmax(x, 0) and softmax(x, 2) of one bf16 tensor: both groups read the same f32 convert
// through unit views. The first group clones the convert and its view; the original view is then
// dead and must not be adopted by the second group (it used to be, and annotate() crashed on the
// erased op). Every view left in @main belongs to a group; both reductions are kernels.
// RUN: uniorch-opt %s -p 'uniorch-fuse' | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK-NOT: output_shape [{{[0-9, ]*}}] : tensor
// CHECK: tensor.expand_shape {{.*}}uniorch.group = 0 : i64
// CHECK: linalg.generic {{.*}}uniorch.domain = {parallel = [4], reduction = {{.*}}}, uniorch.group = 0 : i64, uniorch.kind = "reduction"
// CHECK-NOT: output_shape [{{[0-9, ]*}}] : tensor
// CHECK: tensor.expand_shape {{.*}}uniorch.group = 1 : i64
// CHECK: linalg.generic {{.*}}uniorch.domain = {parallel = [4], reduction = {{.*}}}, uniorch.group = 1 : i64, uniorch.kind = "reduction"
// CHECK-NOT: output_shape [{{[0-9, ]*}}] : tensor
// CHECK: return

#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#map1 = affine_map<(d0, d1, d2) -> ()>
#map2 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map3 = affine_map<(d0, d1, d2, d3) -> (d1, d2, d3)>
#map4 = affine_map<(d0, d1, d2) -> (0, d1, d2)>
#map5 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map6 = affine_map<(d0, d1, d2) -> (d0, d1, 0)>
module attributes {uniorch.inputs = ["user:0"], uniorch.model = "factory.<locals>.f"} {
  func.func @main(%arg0: tensor<1x4x1xbf16>) -> (tensor<1x4x1xbf16>, tensor<1x4x1xbf16>) {
    %cst = arith.constant 0xFF800000 : f32
    %cst_0 = arith.constant 0.000000e+00 : f32
    %0 = tensor.empty() : tensor<1x4x1xf32>
    %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%arg0 : tensor<1x4x1xbf16>) outs(%0 : tensor<1x4x1xf32>) {
    ^bb0(%in: bf16, %out: f32):
      %16 = arith.extf %in : bf16 to f32
      linalg.yield %16 : f32
    } -> tensor<1x4x1xf32>
    %2 = tensor.empty() : tensor<4x1xf32>
    %expanded = tensor.expand_shape %2 [[0, 1], [2]] output_shape [1, 4, 1] : tensor<4x1xf32> into tensor<1x4x1xf32>
    %3 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%cst : f32) outs(%expanded : tensor<1x4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<1x4x1xf32>
    %expanded_1 = tensor.expand_shape %1 [[0], [1, 2], [3]] output_shape [1, 1, 4, 1] : tensor<1x4x1xf32> into tensor<1x1x4x1xf32>
    %4 = linalg.generic {indexing_maps = [#map2, #map3], iterator_types = ["reduction", "parallel", "parallel", "parallel"]} ins(%expanded_1 : tensor<1x1x4x1xf32>) outs(%3 : tensor<1x4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.maximumf %in, %out : f32
      linalg.yield %16 : f32
    } -> tensor<1x4x1xf32>
    %5 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%1, %4 : tensor<1x4x1xf32>, tensor<1x4x1xf32>) outs(%0 : tensor<1x4x1xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %16 = arith.subf %in, %in_4 : f32
      %17 = math.exp %16 : f32
      linalg.yield %17 : f32
    } -> tensor<1x4x1xf32>
    %6 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%cst_0 : f32) outs(%0 : tensor<1x4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<1x4x1xf32>
    %7 = linalg.generic {indexing_maps = [#map, #map4], iterator_types = ["reduction", "parallel", "parallel"]} ins(%5 : tensor<1x4x1xf32>) outs(%6 : tensor<1x4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.addf %in, %out : f32
      linalg.yield %16 : f32
    } -> tensor<1x4x1xf32>
    %8 = tensor.empty() : tensor<1x4x1xbf16>
    %9 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%5, %7 : tensor<1x4x1xf32>, tensor<1x4x1xf32>) outs(%8 : tensor<1x4x1xbf16>) {
    ^bb0(%in: f32, %in_4: f32, %out: bf16):
      %16 = arith.divf %in, %in_4 : f32
      %17 = arith.truncf %16 : f32 to bf16
      linalg.yield %17 : bf16
    } -> tensor<1x4x1xbf16>
    %10 = tensor.empty() : tensor<1x4xf32>
    %expanded_2 = tensor.expand_shape %10 [[0], [1, 2]] output_shape [1, 4, 1] : tensor<1x4xf32> into tensor<1x4x1xf32>
    %11 = linalg.generic {indexing_maps = [#map1, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%cst : f32) outs(%expanded_2 : tensor<1x4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<1x4x1xf32>
    %expanded_3 = tensor.expand_shape %1 [[0], [1, 2], [3]] output_shape [1, 4, 1, 1] : tensor<1x4x1xf32> into tensor<1x4x1x1xf32>
    %12 = linalg.generic {indexing_maps = [#map2, #map5], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%expanded_3 : tensor<1x4x1x1xf32>) outs(%11 : tensor<1x4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.maximumf %in, %out : f32
      linalg.yield %16 : f32
    } -> tensor<1x4x1xf32>
    %13 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%1, %12 : tensor<1x4x1xf32>, tensor<1x4x1xf32>) outs(%0 : tensor<1x4x1xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %16 = arith.subf %in, %in_4 : f32
      %17 = math.exp %16 : f32
      linalg.yield %17 : f32
    } -> tensor<1x4x1xf32>
    %14 = linalg.generic {indexing_maps = [#map, #map6], iterator_types = ["parallel", "parallel", "reduction"]} ins(%13 : tensor<1x4x1xf32>) outs(%6 : tensor<1x4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %16 = arith.addf %in, %out : f32
      linalg.yield %16 : f32
    } -> tensor<1x4x1xf32>
    %15 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%13, %14 : tensor<1x4x1xf32>, tensor<1x4x1xf32>) outs(%8 : tensor<1x4x1xbf16>) {
    ^bb0(%in: f32, %in_4: f32, %out: bf16):
      %16 = arith.divf %in, %in_4 : f32
      %17 = arith.truncf %16 : f32 to bf16
      linalg.yield %17 : bf16
    } -> tensor<1x4x1xbf16>
    return %9, %15 : tensor<1x4x1xbf16>, tensor<1x4x1xbf16>
  }
}
