// Fusing %a with %c would need %b, reached through general reshapes that stay in @main between
// kernels: the group could not be launched as one unit, so %a and %c are kept apart.
// RUN: uniorch-opt %s -p 'uniorch-fuse' | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: %[[A:.*]] = linalg.generic {{.*}}uniorch.group = 0 : i64
// CHECK: %[[V:.*]] = tensor.collapse_shape %[[A]] {{\[\[}}0, 1]] : tensor<4x8xf32> into tensor<32xf32>{{$}}
// CHECK: %[[B:.*]] = linalg.generic {{.*}} ins(%[[V]] {{.*}}uniorch.group = 1 : i64
// CHECK: %[[W:.*]] = tensor.expand_shape %[[B]] {{\[\[}}0, 1]] output_shape [4, 8] : tensor<32xf32> into tensor<4x8xf32>{{$}}
// CHECK: linalg.generic {{.*}} ins(%[[A]], %[[W]] {{.*}}uniorch.group = 2 : i64
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#id1 = affine_map<(d0) -> (d0)>
module {
  func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %e2 = tensor.empty() : tensor<4x8xf32>
    %e1 = tensor.empty() : tensor<32xf32>
    %a = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x8xf32>) outs(%e2 : tensor<4x8xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = math.exp %in : f32
      linalg.yield %0 : f32
    } -> tensor<4x8xf32>
    %v = tensor.collapse_shape %a [[0, 1]] : tensor<4x8xf32> into tensor<32xf32>
    %b = linalg.generic {indexing_maps = [#id1, #id1], iterator_types = ["parallel"]} ins(%v : tensor<32xf32>) outs(%e1 : tensor<32xf32>) {
    ^bb0(%in: f32, %out: f32):
      %0 = math.sin %in : f32
      linalg.yield %0 : f32
    } -> tensor<32xf32>
    %w = tensor.expand_shape %b [[0, 1]] output_shape [4, 8] : tensor<32xf32> into tensor<4x8xf32>
    %c = linalg.generic {indexing_maps = [#id2, #id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%a, %w : tensor<4x8xf32>, tensor<4x8xf32>) outs(%e2 : tensor<4x8xf32>) {
    ^bb0(%in: f32, %in_0: f32, %out: f32):
      %0 = arith.addf %in, %in_0 : f32
      linalg.yield %0 : f32
    } -> tensor<4x8xf32>
    return %c : tensor<4x8xf32>
  }
}
