// SwiGLU: the down projection's operand silu(gate) * up was fused into its body upstream; it
// becomes the gate projection's epilogue again, and all three projections are contractions.
// RUN: uniorch-opt %s -p 'uniorch-preprocess,uniorch-fuse' | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: %[[G:.*]] = linalg.generic {{.*}}uniorch.group = 0 : i64, uniorch.kind = "contraction"
// CHECK: %[[U:.*]] = linalg.generic {{.*}}uniorch.group = 1 : i64, uniorch.kind = "contraction"
// CHECK: %[[H:.*]] = linalg.generic {{.*}} ins(%[[G]], %[[U]] {{.*}}uniorch.group = 0 : i64
// CHECK: math.exp
// CHECK: %[[D:.*]] = linalg.generic {{.*}} ins(%[[H]], {{.*}}uniorch.group = 2 : i64, uniorch.kind = "contraction"
// CHECK-NOT: uniorch.group = 3
// CHECK: return %[[D]]

#map = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
module attributes {uniorch.inputs = ["parameter:g.weight", "parameter:u.weight", "parameter:d.weight", "user:0"], uniorch.model = "SwiGLU"} {
  func.func @main(%arg0: tensor<48x32xf32>, %arg1: tensor<48x32xf32>, %arg2: tensor<32x48xf32>, %arg3: tensor<1x4x32xf32>) -> tensor<1x4x32xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 1.000000e+00 : f32
    %0 = tensor.empty() : tensor<32x48xf32>
    %transposed = linalg.transpose ins(%arg0 : tensor<48x32xf32>) outs(%0 : tensor<32x48xf32>) permutation = [1, 0] 
    %collapsed = tensor.collapse_shape %arg3 [[0, 1], [2]] : tensor<1x4x32xf32> into tensor<4x32xf32>
    %1 = tensor.empty() : tensor<4x48xf32>
    %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<4x48xf32>) -> tensor<4x48xf32>
    %3 = linalg.matmul ins(%collapsed, %transposed : tensor<4x32xf32>, tensor<32x48xf32>) outs(%2 : tensor<4x48xf32>) -> tensor<4x48xf32>
    %expanded = tensor.expand_shape %3 [[0, 1], [2]] output_shape [1, 4, 48] : tensor<4x48xf32> into tensor<1x4x48xf32>
    %4 = tensor.empty() : tensor<1x4x48xf32>
    %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%expanded : tensor<1x4x48xf32>) outs(%4 : tensor<1x4x48xf32>) {
    ^bb0(%in: f32, %out: f32):
      %13 = arith.negf %in : f32
      %14 = math.exp %13 : f32
      %15 = arith.addf %14, %cst_0 : f32
      %16 = arith.divf %cst_0, %15 : f32
      linalg.yield %16 : f32
    } -> tensor<1x4x48xf32>
    %6 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%expanded, %5 : tensor<1x4x48xf32>, tensor<1x4x48xf32>) outs(%4 : tensor<1x4x48xf32>) {
    ^bb0(%in: f32, %in_6: f32, %out: f32):
      %13 = arith.mulf %in, %in_6 : f32
      linalg.yield %13 : f32
    } -> tensor<1x4x48xf32>
    %transposed_1 = linalg.transpose ins(%arg1 : tensor<48x32xf32>) outs(%0 : tensor<32x48xf32>) permutation = [1, 0] 
    %7 = linalg.matmul ins(%collapsed, %transposed_1 : tensor<4x32xf32>, tensor<32x48xf32>) outs(%2 : tensor<4x48xf32>) -> tensor<4x48xf32>
    %expanded_2 = tensor.expand_shape %7 [[0, 1], [2]] output_shape [1, 4, 48] : tensor<4x48xf32> into tensor<1x4x48xf32>
    %8 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel", "parallel"]} ins(%6, %expanded_2 : tensor<1x4x48xf32>, tensor<1x4x48xf32>) outs(%4 : tensor<1x4x48xf32>) {
    ^bb0(%in: f32, %in_6: f32, %out: f32):
      %13 = arith.mulf %in, %in_6 : f32
      linalg.yield %13 : f32
    } -> tensor<1x4x48xf32>
    %9 = tensor.empty() : tensor<48x32xf32>
    %transposed_3 = linalg.transpose ins(%arg2 : tensor<32x48xf32>) outs(%9 : tensor<48x32xf32>) permutation = [1, 0] 
    %collapsed_4 = tensor.collapse_shape %8 [[0, 1], [2]] : tensor<1x4x48xf32> into tensor<4x48xf32>
    %10 = tensor.empty() : tensor<4x32xf32>
    %11 = linalg.fill ins(%cst : f32) outs(%10 : tensor<4x32xf32>) -> tensor<4x32xf32>
    %12 = linalg.matmul ins(%collapsed_4, %transposed_3 : tensor<4x48xf32>, tensor<48x32xf32>) outs(%11 : tensor<4x32xf32>) -> tensor<4x32xf32>
    %expanded_5 = tensor.expand_shape %12 [[0, 1], [2]] output_shape [1, 4, 32] : tensor<4x32xf32> into tensor<1x4x32xf32>
    return %expanded_5 : tensor<1x4x32xf32>
  }
}
