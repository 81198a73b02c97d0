// A returned transpose of a computed value, where eager returns it as a view (the importer records
// eager's strides and offset per result: uniorch.result_layouts), is a linalg.transpose in @main,
// which the launch plan makes a permute of the kernel's result: k and v below, disjoint slices of
// one product, as a GPT-2 attention's forward saves them. No copy kernel writes them.
// Copies stay for: the transpose of a product returned as well (a view would share elements eager
// holds apart), the transpose of an input (a view of the caller's tensor), and a slice whose
// recorded layout is contiguous (eager copied it).
// RUN: uniorch-opt %s -p 'uniorch-preprocess, uniorch-fuse, uniorch-schedule, uniorch-plan-memory' | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: %[[P:.*]] = call @k0_contraction
// CHECK: %[[Q:.*]] = tensor.extract_slice %[[P]][0, 0, 1, 0] [2, 8, 1, 16]
// CHECK: %[[K:.*]] = tensor.extract_slice %[[P]][0, 0, 2, 0] [2, 8, 1, 16]
// CHECK: %[[V:.*]] = tensor.extract_slice %[[P]][0, 0, 3, 0] [2, 8, 1, 16]
// CHECK: %[[QT:.*]] = call @k1_pointwise(%[[Q]])
// CHECK: %[[P2:.*]]:2 = call @k2_contraction
// CHECK: %[[XT:.*]] = call @k3_pointwise(%arg0)
// CHECK: %[[KT:.*]] = linalg.transpose ins(%[[K]] : tensor<2x8x1x16xf32>) {{.*}} permutation = [0, 2, 1, 3]
// CHECK: %[[VT:.*]] = linalg.transpose ins(%[[V]] : tensor<2x8x1x16xf32>) {{.*}} permutation = [0, 2, 1, 3]
// CHECK: return %[[KT]], %[[VT]], %[[P2]]#0, %[[P2]]#1, %[[XT]], %[[QT]] :

#mm_a = affine_map<(d0, d1, d2) -> (d0, d2)>
#mm_b = affine_map<(d0, d1, d2) -> (d2, d1)>
#mm_c = affine_map<(d0, d1, d2) -> (d0, d1)>
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
#swap4 = affine_map<(d0, d1, d2, d3) -> (d0, d2, d1, d3)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#t2 = affine_map<(d0, d1) -> (d1, d0)>
module {
  func.func @main(%x: tensor<16x32xf32>, %w: tensor<32x64xf32>, %w2: tensor<32x8xf32>)
      -> (tensor<2x1x8x16xf32>, tensor<2x1x8x16xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<32x16xf32>,
          tensor<2x1x8x16xf32>)
      attributes {uniorch.result_layouts = [array<i64: 512, 16, 64, 1, 32>, array<i64: 512, 16, 64, 1, 48>,
                                            array<i64: 8, 1, 0>, array<i64: 1, 8, 0>, array<i64: 1, 32, 0>,
                                            array<i64: 128, 128, 16, 1, 0>]} {
    %zero = arith.constant 0.000000e+00 : f32
    %e = tensor.empty() : tensor<16x64xf32>
    %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<16x64xf32>) -> tensor<16x64xf32>
    %p = linalg.generic {indexing_maps = [#mm_a, #mm_b, #mm_c], iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%x, %w : tensor<16x32xf32>, tensor<32x64xf32>) outs(%acc : tensor<16x64xf32>) {
    ^bb0(%a: f32, %b: f32, %c: f32):
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %c, %m : f32
      linalg.yield %s : f32
    } -> tensor<16x64xf32>
    %heads = tensor.expand_shape %p [[0, 1], [2, 3]] output_shape [2, 8, 4, 16] : tensor<16x64xf32> into tensor<2x8x4x16xf32>
    %q = tensor.extract_slice %heads[0, 0, 1, 0] [2, 8, 1, 16] [1, 1, 1, 1] : tensor<2x8x4x16xf32> to tensor<2x8x1x16xf32>
    %k = tensor.extract_slice %heads[0, 0, 2, 0] [2, 8, 1, 16] [1, 1, 1, 1] : tensor<2x8x4x16xf32> to tensor<2x8x1x16xf32>
    %v = tensor.extract_slice %heads[0, 0, 3, 0] [2, 8, 1, 16] [1, 1, 1, 1] : tensor<2x8x4x16xf32> to tensor<2x8x1x16xf32>
    %et = tensor.empty() : tensor<2x1x8x16xf32>
    %kt = linalg.generic {indexing_maps = [#swap4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
        ins(%k : tensor<2x8x1x16xf32>) outs(%et : tensor<2x1x8x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<2x1x8x16xf32>
    %vt = linalg.generic {indexing_maps = [#swap4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
        ins(%v : tensor<2x8x1x16xf32>) outs(%et : tensor<2x1x8x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<2x1x8x16xf32>
    %qt = linalg.generic {indexing_maps = [#swap4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
        ins(%q : tensor<2x8x1x16xf32>) outs(%et : tensor<2x1x8x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<2x1x8x16xf32>
    %e2 = tensor.empty() : tensor<16x8xf32>
    %acc2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<16x8xf32>) -> tensor<16x8xf32>
    %p2 = linalg.generic {indexing_maps = [#mm_a, #mm_b, #mm_c], iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%x, %w2 : tensor<16x32xf32>, tensor<32x8xf32>) outs(%acc2 : tensor<16x8xf32>) {
    ^bb0(%a: f32, %b: f32, %c: f32):
      %m = arith.mulf %a, %b : f32
      %s = arith.addf %c, %m : f32
      linalg.yield %s : f32
    } -> tensor<16x8xf32>
    %e3 = tensor.empty() : tensor<8x16xf32>
    %p2t = linalg.generic {indexing_maps = [#t2, #id2], iterator_types = ["parallel", "parallel"]}
        ins(%p2 : tensor<16x8xf32>) outs(%e3 : tensor<8x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<8x16xf32>
    %e4 = tensor.empty() : tensor<32x16xf32>
    %xt = linalg.generic {indexing_maps = [#t2, #id2], iterator_types = ["parallel", "parallel"]}
        ins(%x : tensor<16x32xf32>) outs(%e4 : tensor<32x16xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<32x16xf32>
    return %kt, %vt, %p2, %p2t, %xt, %qt : tensor<2x1x8x16xf32>, tensor<2x1x8x16xf32>, tensor<16x8xf32>, tensor<8x16xf32>, tensor<32x16xf32>, tensor<2x1x8x16xf32>
  }
}
