// A two-layer MLP, x + proj(gelu(fc(x))), with a hidden width (40) that is not a power of two.
// uniorch-fuse leaves two contractions: fc with its bias and GELU as the epilogue, writing the
// hidden activation, and proj with its bias and the residual add, reading it back.
// uniorch-fuse-chain makes them one kernel of kind "chain" whose anchor is proj's contraction
// (domain: rows and output width parallel; hidden and input width reduced); the op defining the
// hidden activation is marked and nothing is stored between the two products.
// RUN: uniorch-opt %s -p 'uniorch-preprocess,uniorch-fuse,uniorch-fuse-attention' | FileCheck %s --check-prefix=UNFUSED
// RUN: uniorch-opt %s -p 'uniorch-preprocess,uniorch-fuse,uniorch-fuse-attention,uniorch-fuse-chain' | FileCheck %s

// UNFUSED-LABEL: func.func @main
// UNFUSED: uniorch.group = 0 : i64, uniorch.kind = "contraction"
// UNFUSED: uniorch.group = 1 : i64, uniorch.kind = "contraction"
// UNFUSED-NOT: uniorch.kind = "chain"

// CHECK-LABEL: func.func @main
// CHECK-NOT: uniorch.kind = "contraction"
// CHECK: uniorch.chain_hidden = 0 : i64
// CHECK-SAME: uniorch.group = 0 : i64
// CHECK: math.erf
// CHECK: uniorch.chain = {}
// CHECK-SAME: uniorch.domain = {parallel = [6, 16], reduction = [40, 16]}, uniorch.group = 0 : i64, uniorch.kind = "chain"
// CHECK-NOT: uniorch.group = 1
// CHECK-NOT: uniorch.kind = "contraction"
// CHECK: return

#map = affine_map<(d0, d1) -> (d0, d1)>
#map1 = affine_map<(d0, d1) -> (d1)>
module attributes {uniorch.inputs = ["parameter:fc.weight", "parameter:fc.bias", "parameter:proj.weight", "parameter:proj.bias", "user:0"], uniorch.model = "MLP"} {
  func.func @main(%arg0: tensor<40x16xf32>, %arg1: tensor<40xf32>, %arg2: tensor<16x40xf32>, %arg3: tensor<16xf32>, %arg4: tensor<6x16xf32>) -> tensor<6x16xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 1.000000e+00 : f32
    %cst_1 = arith.constant 5.000000e-01 : f32
    %cst_2 = arith.constant 1.41421354 : f32
    %0 = tensor.empty() : tensor<16x40xf32>
    %transposed = linalg.transpose ins(%arg0 : tensor<40x16xf32>) outs(%0 : tensor<16x40xf32>) permutation = [1, 0] 
    %1 = tensor.empty() : tensor<6x40xf32>
    %2 = linalg.fill ins(%cst : f32) outs(%1 : tensor<6x40xf32>) -> tensor<6x40xf32>
    %3 = linalg.matmul ins(%arg4, %transposed : tensor<6x16xf32>, tensor<16x40xf32>) outs(%2 : tensor<6x40xf32>) -> tensor<6x40xf32>
    %4 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%3, %arg1 : tensor<6x40xf32>, tensor<40xf32>) outs(%1 : tensor<6x40xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %12 = arith.addf %in, %in_4 : f32
      linalg.yield %12 : f32
    } -> tensor<6x40xf32>
    %5 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} ins(%4 : tensor<6x40xf32>) outs(%1 : tensor<6x40xf32>) {
    ^bb0(%in: f32, %out: f32):
      %12 = arith.divf %in, %cst_2 : f32
      %13 = math.erf %12 : f32
      %14 = arith.addf %13, %cst_0 : f32
      %15 = arith.mulf %14, %cst_1 : f32
      %16 = arith.mulf %in, %15 : f32
      linalg.yield %16 : f32
    } -> tensor<6x40xf32>
    %6 = tensor.empty() : tensor<40x16xf32>
    %transposed_3 = linalg.transpose ins(%arg2 : tensor<16x40xf32>) outs(%6 : tensor<40x16xf32>) permutation = [1, 0] 
    %7 = tensor.empty() : tensor<6x16xf32>
    %8 = linalg.fill ins(%cst : f32) outs(%7 : tensor<6x16xf32>) -> tensor<6x16xf32>
    %9 = linalg.matmul ins(%5, %transposed_3 : tensor<6x40xf32>, tensor<40x16xf32>) outs(%8 : tensor<6x16xf32>) -> tensor<6x16xf32>
    %10 = linalg.generic {indexing_maps = [#map, #map1, #map], iterator_types = ["parallel", "parallel"]} ins(%9, %arg3 : tensor<6x16xf32>, tensor<16xf32>) outs(%7 : tensor<6x16xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %12 = arith.addf %in, %in_4 : f32
      linalg.yield %12 : f32
    } -> tensor<6x16xf32>
    %11 = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]} ins(%arg4, %10 : tensor<6x16xf32>, tensor<6x16xf32>) outs(%7 : tensor<6x16xf32>) {
    ^bb0(%in: f32, %in_4: f32, %out: f32):
      %12 = arith.addf %in, %in_4 : f32
      linalg.yield %12 : f32
    } -> tensor<6x16xf32>
    return %11 : tensor<6x16xf32>
  }
}
