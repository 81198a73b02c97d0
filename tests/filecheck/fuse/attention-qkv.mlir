// Causal attention over a fused qkv projection. The permute of the projection and the zero fills
// of the matmul accumulators never become kernels of their own: each q/k/v slice is transposed
// inside the kernel that reads it, and each fill inside its contraction. uniorch-fuse leaves four
// kernels: the projection, QK^T, softmax with the causal mask (cloned into it, SDPA's safe form),
// and P.V; uniorch-fuse-attention makes the last three one flash-attention kernel whose anchor
// (P.V) records the safe softmax, and marks the op defining the masked scores.
// RUN: uniorch-opt %s -p 'uniorch-preprocess,uniorch-fuse' | FileCheck %s --check-prefix=UNFUSED
// RUN: uniorch-opt %s -p 'uniorch-preprocess,uniorch-fuse,uniorch-fuse-attention' | FileCheck %s

// UNFUSED-LABEL: func.func @main
// UNFUSED: uniorch.group = {{[0-9]}} : i64, uniorch.kind = "contraction"
// UNFUSED: uniorch.group = {{[0-9]}} : i64, uniorch.kind = "contraction"
// UNFUSED: uniorch.group = {{[0-9]}} : i64, uniorch.kind = "reduction"
// UNFUSED: uniorch.group = {{[0-9]}} : i64, uniorch.kind = "contraction"
// UNFUSED-NOT: uniorch.kind = "attention"

// CHECK-LABEL: func.func @main
// CHECK-NOT: uniorch.kind = "pointwise"
// CHECK: uniorch.group = 0 : i64, uniorch.kind = "contraction"
// CHECK: uniorch.attention_scores = 0 : i64
// CHECK-SAME: uniorch.group = 1 : i64
// CHECK-NOT: uniorch.kind = "reduction"
// CHECK: uniorch.attention = {safe = true}
// CHECK-SAME: uniorch.domain = {parallel = [2, 4, 16], reduction = [4, 16]}, uniorch.group = 1 : i64, uniorch.kind = "attention"
// CHECK-NOT: uniorch.group = 2
// CHECK: return

#map = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#map1 = affine_map<(d0) -> (d0)>
#map2 = affine_map<(d0, d1) -> (0, d1)>
#map3 = affine_map<(d0, d1) -> (d0, 0)>
#map4 = affine_map<(d0, d1) -> (d0, d1)>
#map5 = affine_map<(d0, d1) -> ()>
#map6 = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
#map7 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#map8 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, 0)>
module attributes {uniorch.inputs = ["parameter:qkv.weight", "user:0"], uniorch.model = "Attn"} {
  func.func @main(%arg0: tensor<96x32xf32>, %arg1: tensor<1x4x32xf32>) -> tensor<1x2x4x16xf32> {
    %c0_i64 = arith.constant 0 : i64
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 0xFF800000 : f32
    %true = arith.constant true
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<1x2x4x4xf32>
    %cst_2 = arith.constant dense<0.000000e+00> : tensor<f32>
    %cst_3 = arith.constant dense<0xFF800000> : tensor<f32>
    %cst_4 = arith.constant dense<true> : tensor<4x4xi1>
    %cst_5 = arith.constant 0xFFF0000000000000 : f64
    %cst_6 = arith.constant 5.000000e-01 : f32
    %0 = tensor.empty() : tensor<32x96xf32>
    %transposed = linalg.transpose ins(%arg0 : tensor<96x32xf32>) outs(%0 : tensor<32x96xf32>) permutation = [1, 0] 
    %collapsed = tensor.collapse_shape %arg1 [[0, 1], [2]] : tensor<1x4x32xf32> into tensor<4x32xf32>
    %1 = tensor.empty() : tensor<4x96xf32>
    %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<4x96xf32>) -> tensor<4x96xf32>
    %3 = linalg.matmul ins(%collapsed, %transposed : tensor<4x32xf32>, tensor<32x96xf32>) outs(%2 : tensor<4x96xf32>) -> tensor<4x96xf32>
    %expanded = tensor.expand_shape %3 [[0, 1], [2, 3, 4]] output_shape [1, 4, 3, 2, 16] : tensor<4x96xf32> into tensor<1x4x3x2x16xf32>
    %4 = tensor.empty() : tensor<3x1x2x4x16xf32>
    %transposed_7 = linalg.transpose ins(%expanded : tensor<1x4x3x2x16xf32>) outs(%4 : tensor<3x1x2x4x16xf32>) permutation = [2, 0, 3, 1, 4] 
    %extracted_slice = tensor.extract_slice %transposed_7[0, 0, 0, 0, 0] [1, 1, 2, 4, 16] [1, 1, 1, 1, 1] : tensor<3x1x2x4x16xf32> to tensor<1x1x2x4x16xf32>
    %extracted_slice_8 = tensor.extract_slice %transposed_7[1, 0, 0, 0, 0] [1, 1, 2, 4, 16] [1, 1, 1, 1, 1] : tensor<3x1x2x4x16xf32> to tensor<1x1x2x4x16xf32>
    %extracted_slice_9 = tensor.extract_slice %transposed_7[2, 0, 0, 0, 0] [1, 1, 2, 4, 16] [1, 1, 1, 1, 1] : tensor<3x1x2x4x16xf32> to tensor<1x1x2x4x16xf32>
    %collapsed_10 = tensor.collapse_shape %extracted_slice [[0, 1], [2], [3], [4]] : tensor<1x1x2x4x16xf32> into tensor<1x2x4x16xf32>
    %collapsed_11 = tensor.collapse_shape %extracted_slice_8 [[0, 1], [2], [3], [4]] : tensor<1x1x2x4x16xf32> into tensor<1x2x4x16xf32>
    %5 = tensor.empty() : tensor<1x2x4x16xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%collapsed_10 : tensor<1x2x4x16xf32>) outs(%5 : tensor<1x2x4x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      %43 = arith.mulf %in, %cst_6 : f32
      linalg.yield %43 : f32
    } -> tensor<1x2x4x16xf32>
    %7 = tensor.empty() : tensor<4xi64>
    %8 = linalg.generic {indexing_maps = [#map1], iterator_types = ["parallel"]} outs(%7 : tensor<4xi64>) {
    ^bb0(%out: i64):
      %43 = linalg.index 0 : index
      %44 = arith.index_cast %43 : index to i64
      linalg.yield %44 : i64
    } -> tensor<4xi64>
    %expanded_12 = tensor.expand_shape %8 [[0, 1]] output_shape [1, 4] : tensor<4xi64> into tensor<1x4xi64>
    %expanded_13 = tensor.expand_shape %8 [[0, 1]] output_shape [4, 1] : tensor<4xi64> into tensor<4x1xi64>
    %9 = tensor.empty() : tensor<4x4xi64>
    %10 = linalg.generic {indexing_maps = [#map2, #map3, #map4], iterator_types = ["parallel", "parallel"]} ins(%expanded_12, %expanded_13 : tensor<1x4xi64>, tensor<4x1xi64>) outs(%9 : tensor<4x4xi64>) {
    ^bb0(%in: i64, %in_22: i64, %out: i64):
      %43 = arith.subi %in, %in_22 : i64
      linalg.yield %43 : i64
    } -> tensor<4x4xi64>
    %11 = tensor.empty() : tensor<4x4xi1>
    %12 = linalg.generic {indexing_maps = [#map4, #map4], iterator_types = ["parallel", "parallel"]} ins(%10 : tensor<4x4xi64>) outs(%11 : tensor<4x4xi1>) {
    ^bb0(%in: i64, %out: i1):
      %43 = arith.cmpi sle, %in, %c0_i64 : i64
      linalg.yield %43 : i1
    } -> tensor<4x4xi1>
    %13 = linalg.generic {indexing_maps = [#map4, #map4, #map4], iterator_types = ["parallel", "parallel"]} ins(%12, %cst_4 : tensor<4x4xi1>, tensor<4x4xi1>) outs(%11 : tensor<4x4xi1>) {
    ^bb0(%in: i1, %in_22: i1, %out: i1):
      %43 = arith.andi %in, %in_22 : i1
      linalg.yield %43 : i1
    } -> tensor<4x4xi1>
    %14 = tensor.empty() : tensor<4x4xf32>
    %15 = linalg.generic {indexing_maps = [#map4, #map5, #map5, #map4], iterator_types = ["parallel", "parallel"]} ins(%13, %cst_2, %cst_3 : tensor<4x4xi1>, tensor<f32>, tensor<f32>) outs(%14 : tensor<4x4xf32>) {
    ^bb0(%in: i1, %in_22: f32, %in_23: f32, %out: f32):
      %43 = arith.select %in, %in_22, %in_23 : f32
      linalg.yield %43 : f32
    } -> tensor<4x4xf32>
    %16 = tensor.empty() : tensor<1x2x16x4xf32>
    %transposed_14 = linalg.transpose ins(%collapsed_11 : tensor<1x2x4x16xf32>) outs(%16 : tensor<1x2x16x4xf32>) permutation = [0, 1, 3, 2] 
    %17 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%transposed_14 : tensor<1x2x16x4xf32>) outs(%16 : tensor<1x2x16x4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %43 = arith.mulf %in, %cst_6 : f32
      linalg.yield %43 : f32
    } -> tensor<1x2x16x4xf32>
    %collapsed_15 = tensor.collapse_shape %6 [[0, 1], [2], [3]] : tensor<1x2x4x16xf32> into tensor<2x4x16xf32>
    %collapsed_16 = tensor.collapse_shape %17 [[0, 1], [2], [3]] : tensor<1x2x16x4xf32> into tensor<2x16x4xf32>
    %18 = tensor.empty() : tensor<2x4x4xf32>
    %19 = linalg.fill ins(%cst : f32) outs(%18 : tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %20 = linalg.batch_matmul ins(%collapsed_15, %collapsed_16 : tensor<2x4x16xf32>, tensor<2x16x4xf32>) outs(%19 : tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %expanded_17 = tensor.expand_shape %20 [[0, 1], [2], [3]] output_shape [1, 2, 4, 4] : tensor<2x4x4xf32> into tensor<1x2x4x4xf32>
    %21 = tensor.empty() : tensor<1x2x4x4xf32>
    %22 = linalg.generic {indexing_maps = [#map, #map6, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%expanded_17, %15 : tensor<1x2x4x4xf32>, tensor<4x4xf32>) outs(%21 : tensor<1x2x4x4xf32>) {
    ^bb0(%in: f32, %in_22: f32, %out: f32):
      %43 = arith.addf %in, %in_22 : f32
      linalg.yield %43 : f32
    } -> tensor<1x2x4x4xf32>
    %23 = tensor.empty() : tensor<1x2x4xi64>
    %24 = linalg.fill ins(%c0_i64 : i64) outs(%23 : tensor<1x2x4xi64>) -> tensor<1x2x4xi64>
    %25 = tensor.empty() : tensor<1x2x4xf32>
    %26 = linalg.fill ins(%cst_0 : f32) outs(%25 : tensor<1x2x4xf32>) -> tensor<1x2x4xf32>
    %27:2 = linalg.generic {indexing_maps = [#map, #map7, #map7], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%22 : tensor<1x2x4x4xf32>) outs(%26, %24 : tensor<1x2x4xf32>, tensor<1x2x4xi64>) {
    ^bb0(%in: f32, %out: f32, %out_22: i64):
      %43 = linalg.index 3 : index
      %44 = arith.index_cast %43 : index to i64
      %45 = arith.maximumf %in, %out : f32
      %46 = arith.cmpf ogt, %in, %out : f32
      %47 = arith.select %46, %44, %out_22 : i64
      linalg.yield %45, %47 : f32, i64
    } -> (tensor<1x2x4xf32>, tensor<1x2x4xi64>)
    %expanded_18 = tensor.expand_shape %27#0 [[0], [1], [2, 3]] output_shape [1, 2, 4, 1] : tensor<1x2x4xf32> into tensor<1x2x4x1xf32>
    %28 = linalg.generic {indexing_maps = [#map, #map8, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%22, %expanded_18 : tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>) outs(%21 : tensor<1x2x4x4xf32>) {
    ^bb0(%in: f32, %in_22: f32, %out: f32):
      %43 = arith.subf %in, %in_22 : f32
      linalg.yield %43 : f32
    } -> tensor<1x2x4x4xf32>
    %29 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%28 : tensor<1x2x4x4xf32>) outs(%21 : tensor<1x2x4x4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %43 = math.exp %in : f32
      linalg.yield %43 : f32
    } -> tensor<1x2x4x4xf32>
    %30 = tensor.empty() : tensor<1x2x4x1xf32>
    %31 = linalg.fill ins(%cst : f32) outs(%30 : tensor<1x2x4x1xf32>) -> tensor<1x2x4x1xf32>
    %32 = linalg.generic {indexing_maps = [#map, #map8], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%29 : tensor<1x2x4x4xf32>) outs(%31 : tensor<1x2x4x1xf32>) {
    ^bb0(%in: f32, %out: f32):
      %43 = arith.addf %in, %out : f32
      linalg.yield %43 : f32
    } -> tensor<1x2x4x1xf32>
    %33 = linalg.generic {indexing_maps = [#map, #map8, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%29, %32 : tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>) outs(%21 : tensor<1x2x4x4xf32>) {
    ^bb0(%in: f32, %in_22: f32, %out: f32):
      %43 = arith.divf %in, %in_22 : f32
      linalg.yield %43 : f32
    } -> tensor<1x2x4x4xf32>
    %34 = tensor.empty() : tensor<1x2x4x4xi1>
    %35 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%22 : tensor<1x2x4x4xf32>) outs(%34 : tensor<1x2x4x4xi1>) {
    ^bb0(%in: f32, %out: i1):
      %43 = arith.extf %in : f32 to f64
      %44 = arith.cmpf oeq, %43, %cst_5 : f64
      linalg.yield %44 : i1
    } -> tensor<1x2x4x4xi1>
    %36 = tensor.empty() : tensor<1x2x4x1xi1>
    %37 = linalg.fill ins(%true : i1) outs(%36 : tensor<1x2x4x1xi1>) -> tensor<1x2x4x1xi1>
    %38 = linalg.generic {indexing_maps = [#map, #map8], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%35 : tensor<1x2x4x4xi1>) outs(%37 : tensor<1x2x4x1xi1>) {
    ^bb0(%in: i1, %out: i1):
      %43 = arith.andi %in, %out : i1
      linalg.yield %43 : i1
    } -> tensor<1x2x4x1xi1>
    %39 = linalg.generic {indexing_maps = [#map8, #map, #map, #map], iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%38, %cst_1, %33 : tensor<1x2x4x1xi1>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) outs(%21 : tensor<1x2x4x4xf32>) {
    ^bb0(%in: i1, %in_22: f32, %in_23: f32, %out: f32):
      %43 = arith.select %in, %in_22, %in_23 : f32
      linalg.yield %43 : f32
    } -> tensor<1x2x4x4xf32>
    %collapsed_19 = tensor.collapse_shape %39 [[0, 1], [2], [3]] : tensor<1x2x4x4xf32> into tensor<2x4x4xf32>
    %collapsed_20 = tensor.collapse_shape %extracted_slice_9 [[0, 1, 2], [3], [4]] : tensor<1x1x2x4x16xf32> into tensor<2x4x16xf32>
    %40 = tensor.empty() : tensor<2x4x16xf32>
    %41 = linalg.fill ins(%cst : f32) outs(%40 : tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %42 = linalg.batch_matmul ins(%collapsed_19, %collapsed_20 : tensor<2x4x4xf32>, tensor<2x4x16xf32>) outs(%41 : tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
    %expanded_21 = tensor.expand_shape %42 [[0, 1], [2], [3]] output_shape [1, 2, 4, 16] : tensor<2x4x16xf32> into tensor<1x2x4x16xf32>
    return %expanded_21 : tensor<1x2x4x16xf32>
  }
}
