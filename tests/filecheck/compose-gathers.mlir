// uniorch-preprocess composes a gather of a gather: torch's replicate/reflect pad is one gather per
// padded dim, reading an index table; afterwards the only extract reads the function's argument,
// with the index arithmetic inline, so a convolution can load the unpadded tensor in its tiles.
// A gather from a generic that computes with the loaded value (the exp) is left as it is.
// RUN: uniorch-opt %s -p uniorch-preprocess | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK-NOT: tensor<8xindex>
// CHECK: %[[PAD:.*]] = linalg.generic
// CHECK: tensor.extract %arg0[
// CHECK: linalg.generic
// CHECK: arith.minsi
// CHECK-NOT: tensor.extract %[[PAD]]
// CHECK: tensor.extract %arg0[
// CHECK: %[[EXP:.*]] = linalg.generic
// CHECK: math.exp
// CHECK: tensor.extract %[[EXP]][
#id1 = affine_map<(d0) -> (d0)>
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#rows = affine_map<(d0, d1) -> (d0)>
module {
  func.func @main(%arg0: tensor<4x5xf32>) -> (tensor<8x5xf32>, tensor<8x5xf32>) {
    %c0 = arith.constant 0 : index
    %c3 = arith.constant 3 : index
    %c2 = arith.constant 2 : index
    %e1 = tensor.empty() : tensor<8xindex>
    %table = linalg.generic {indexing_maps = [#id1], iterator_types = ["parallel"]} outs(%e1 : tensor<8xindex>) {
    ^bb0(%out: index):
      %i = linalg.index 0 : index
      %s = arith.subi %i, %c2 : index
      %lo = arith.maxsi %s, %c0 : index
      %hi = arith.minsi %lo, %c3 : index
      linalg.yield %hi : index
    } -> tensor<8xindex>
    %e2 = tensor.empty() : tensor<8x5xf32>
    %pad = linalg.generic {indexing_maps = [#rows, #id2], iterator_types = ["parallel", "parallel"]} ins(%table : tensor<8xindex>) outs(%e2 : tensor<8x5xf32>) {
    ^bb0(%r: index, %out: f32):
      %j = linalg.index 1 : index
      %v = tensor.extract %arg0[%r, %j] : tensor<4x5xf32>
      linalg.yield %v : f32
    } -> tensor<8x5xf32>
    %flip = linalg.generic {indexing_maps = [#id2], iterator_types = ["parallel", "parallel"]} outs(%e2 : tensor<8x5xf32>) {
    ^bb0(%out: f32):
      %i = linalg.index 0 : index
      %j = linalg.index 1 : index
      %r = arith.subi %c3, %j : index
      %jj = arith.maxsi %r, %c0 : index
      %v = tensor.extract %pad[%i, %jj] : tensor<8x5xf32>
      linalg.yield %v : f32
    } -> tensor<8x5xf32>
    %ex = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]} ins(%pad : tensor<8x5xf32>) outs(%e2 : tensor<8x5xf32>) {
    ^bb0(%in: f32, %out: f32):
      %v = math.exp %in : f32
      linalg.yield %v : f32
    } -> tensor<8x5xf32>
    %g = linalg.generic {indexing_maps = [#id2], iterator_types = ["parallel", "parallel"]} outs(%e2 : tensor<8x5xf32>) {
    ^bb0(%out: f32):
      %i = linalg.index 0 : index
      %j = linalg.index 1 : index
      %r = arith.subi %c3, %j : index
      %jj = arith.maxsi %r, %c0 : index
      %v = tensor.extract %ex[%i, %jj] : tensor<8x5xf32>
      linalg.yield %v : f32
    } -> tensor<8x5xf32>
    return %flip, %g : tensor<8x5xf32>, tensor<8x5xf32>
  }
}
