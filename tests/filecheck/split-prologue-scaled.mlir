// uniorch-preprocess splits a rotary-embedding prologue out of q·kᵀ (Llama with SDPA): the q side
// reads four tensors and becomes a pointwise generic; the k side is k scaled by SDPA's sqrt(scale),
// a constant truncated from f64, and stays in the contraction's body with its constant. The
// body must not read values of the erased generic (that crashed the verifier).
// RUN: uniorch-opt %s -p uniorch-preprocess | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: %[[Q:.*]] = linalg.generic {{.*}} ins(%arg0, %arg1, %arg2, %arg3 :
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[Q]], %arg4
// CHECK-NEXT: ^bb0(%[[A:.*]]: f32, %[[B:.*]]: f32, %[[OUT:.*]]: f32):
// CHECK: %[[S:.*]] = arith.truncf %{{.*}} : f64 to f32
// CHECK: arith.mulf %[[B]], %[[S]] : f32
// CHECK: arith.mulf %[[A]], %{{.*}} : f32
// CHECK: arith.addf %[[OUT]], %{{.*}} : f32
// CHECK-NEXT: linalg.yield
#q = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#k = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
#o = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
module {
  func.func @main(%arg0: tensor<2x8x16xf32>, %arg1: tensor<2x8x16xf32>, %arg2: tensor<2x8x16xf32>, %arg3: tensor<2x8x16xf32>, %arg4: tensor<2x16x8xf32>) -> tensor<2x8x8xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %scale = arith.constant 0.59460355750136051 : f64
    %0 = tensor.empty() : tensor<2x8x8xf32>
    %1 = linalg.fill ins(%cst : f32) outs(%0 : tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
    %2 = linalg.generic {indexing_maps = [#q, #q, #q, #q, #k, #o], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%arg0, %arg1, %arg2, %arg3, %arg4 : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x16x8xf32>) outs(%1 : tensor<2x8x8xf32>) {
    ^bb0(%in: f32, %cos: f32, %rot: f32, %sin: f32, %kin: f32, %out: f32):
      %s = arith.truncf %scale : f64 to f32
      %ks = arith.mulf %kin, %s : f32
      %a = arith.mulf %rot, %sin : f32
      %b = arith.mulf %in, %cos : f32
      %c = arith.addf %b, %a : f32
      %qs = arith.mulf %c, %s : f32
      %p = arith.mulf %qs, %ks : f32
      %r = arith.addf %out, %p : f32
      linalg.yield %r : f32
    } -> tensor<2x8x8xf32>
    return %2 : tensor<2x8x8xf32>
  }
}
