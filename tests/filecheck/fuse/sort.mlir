// topk(x, 5, -1) = sort along dim 1 + slice: the sort is a kernel of its own ("sort") with the
// index iota it starts from; the slices stay in @main as views.
// RUN: uniorch-opt %s -p 'uniorch-fuse' | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: linalg.generic {{.*}}uniorch.group = 0 : i64
// CHECK: tm_tensor.sort {uniorch.domain = {parallel = [4], reduction = [64]}, uniorch.group = 0 : i64, uniorch.kind = "sort"} dimension(1)
// CHECK-NOT: uniorch.group = 1
// CHECK: tensor.extract_slice

#map = affine_map<(d0, d1) -> (d0, d1)>
module attributes {uniorch.inputs = ["user:0"], uniorch.model = "t"} {
  func.func @main(%arg0: tensor<4x64xf32>) -> (tensor<4x5xf32>, tensor<4x5xi64>) {
    %0 = tensor.empty() : tensor<4x64xi64>
    %1 = linalg.generic {indexing_maps = [#map], iterator_types = ["parallel", "parallel"]} outs(%0 : tensor<4x64xi64>) {
    ^bb0(%out: i64):
      %3 = linalg.index 1 : index
      %4 = arith.index_cast %3 : index to i64
      linalg.yield %4 : i64
    } -> tensor<4x64xi64>
    %2:2 = tm_tensor.sort dimension(1) outs(%arg0, %1 : tensor<4x64xf32>, tensor<4x64xi64>) {
    ^bb0(%arg1: f32, %arg2: f32, %arg3: i64, %arg4: i64):
      %3 = arith.cmpf oge, %arg1, %arg2 : f32
      tm_tensor.yield %3 : i1
    } -> tensor<4x64xf32>, tensor<4x64xi64>
    %extracted_slice = tensor.extract_slice %2#0[0, 0] [4, 5] [1, 1] : tensor<4x64xf32> to tensor<4x5xf32>
    %extracted_slice_0 = tensor.extract_slice %2#1[0, 0] [4, 5] [1, 1] : tensor<4x64xi64> to tensor<4x5xi64>
    return %extracted_slice, %extracted_slice_0 : tensor<4x5xf32>, tensor<4x5xi64>
  }
}
