// uniorch-preprocess: a gather from a transposed copy (a mixture of experts' weights, stored as
// (expert, out, in) and transposed for grouped_mm, read per row by expert index) reads the weights
// themselves at the transposed position; the copy, which a kernel wrote every call, is left
// unread (no kernel computes it: --emit scheduled has the gather's kernel only).
// RUN: uniorch-opt %s -p uniorch-preprocess | FileCheck %s
// RUN: uniorch-opt %s --emit scheduled | FileCheck %s --check-prefix=KERNELS

// CHECK-LABEL: func.func @main
// CHECK: %[[T:[0-9]+]] = linalg.generic
// CHECK: linalg.generic
// CHECK-NOT: tensor.extract %[[T]]
// CHECK: %[[E:.*]] = arith.index_cast
// CHECK: %[[I:.*]] = linalg.index 1 : index
// CHECK: %[[J:.*]] = linalg.index 2 : index
// CHECK: tensor.extract %arg0[%[[E]], %[[J]], %[[I]]] : tensor<4x6x8xf32>

// KERNELS-COUNT-1: func.func private @k{{[0-9]+}}_
// KERNELS-NOT: func.func private @k{{[0-9]+}}_
#experts = affine_map<(d0, d1, d2) -> (d0)>
#id3 = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#swap = affine_map<(d0, d1, d2) -> (d0, d2, d1)>
module {
  func.func @main(%arg0: tensor<4x6x8xf32>, %arg1: tensor<3xi64>) -> tensor<3x8x6xf32> {
    %e0 = tensor.empty() : tensor<4x8x6xf32>
    %t = linalg.generic {indexing_maps = [#swap, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
        ins(%arg0 : tensor<4x6x8xf32>) outs(%e0 : tensor<4x8x6xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<4x8x6xf32>
    %e1 = tensor.empty() : tensor<3x8x6xf32>
    %g = linalg.generic {indexing_maps = [#experts, #id3], iterator_types = ["parallel", "parallel", "parallel"]}
        ins(%arg1 : tensor<3xi64>) outs(%e1 : tensor<3x8x6xf32>) {
    ^bb0(%in: i64, %out: f32):
      %x = arith.index_cast %in : i64 to index
      %i = linalg.index 1 : index
      %j = linalg.index 2 : index
      %v = tensor.extract %t[%x, %i, %j] : tensor<4x8x6xf32>
      linalg.yield %v : f32
    } -> tensor<3x8x6xf32>
    return %g : tensor<3x8x6xf32>
  }
}
