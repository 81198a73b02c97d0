// A copy that only moves unit dims, read through a collapse of its symbolic-length result (an
// embedding gradient's indices): uniorch-preprocess writes the copy in the collapsed shape, its
// empty tensor sized from @main's argument. The empty was built without its size, and the
// preprocess failed verification ("tensor.empty op incorrect number of dynamic sizes").
// RUN: uniorch-opt %s -p uniorch-preprocess | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: tensor.empty(%{{.*}}) : tensor<1x?xi64>
// CHECK: %[[N:.*]] = tensor.dim %arg0, %{{.*}} : tensor<?x1xi64>
// CHECK-NEXT: %[[E:.*]] = tensor.empty(%[[N]]) : tensor<?xi64>
// CHECK: linalg.generic {{.*}} ins(%arg0 : tensor<?x1xi64>) outs(%[[E]] : tensor<?xi64>)
// CHECK-NOT: tensor.collapse_shape
#map = affine_map<(d0, d1) -> (d0, d1)>
#t = affine_map<(d0, d1) -> (d1, d0)>
module attributes {uniorch.inputs = ["user:0"]} {
  func.func @main(%arg0: tensor<?x1xi64>) -> tensor<?xi64> attributes {uniorch.arg_dims = [["s0", ""]]} {
    %c0 = arith.constant 0 : index
    %dim = tensor.dim %arg0, %c0 : tensor<?x1xi64>
    %0 = tensor.empty(%dim) : tensor<1x?xi64>
    %1 = linalg.generic {indexing_maps = [#t, #map], iterator_types = ["parallel", "parallel"]} ins(%arg0 : tensor<?x1xi64>) outs(%0 : tensor<1x?xi64>) {
    ^bb0(%in: i64, %out: i64):
      linalg.yield %in : i64
    } -> tensor<1x?xi64>
    %collapsed = tensor.collapse_shape %1 [[0, 1]] : tensor<1x?xi64> into tensor<?xi64>
    return %collapsed : tensor<?xi64>
  }
}
