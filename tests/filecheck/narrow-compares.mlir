// uniorch-preprocess compares a widened value in its own type when the constant is exact there:
// torch-mlir's `x == -inf` on fp32 (SDPA's safe softmax) must not leave f64 in the kernel.
// A constant that f32 cannot hold (0.1) keeps the f64 compare.
// RUN: uniorch-opt %s -p uniorch-preprocess | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: linalg.generic
// CHECK-NOT: arith.extf
// CHECK: arith.cmpf oeq, %{{.*}}, %{{.*}} : f32
// CHECK: linalg.generic
// CHECK: arith.extf %{{.*}} : f32 to f64
// CHECK: arith.cmpf olt, %{{.*}}, %{{.*}} : f64
#map = affine_map<(d0) -> (d0)>
module {
  func.func @main(%arg0: tensor<8xf32>) -> (tensor<8xi1>, tensor<8xi1>) {
    %ninf = arith.constant 0xFFF0000000000000 : f64
    %tenth = arith.constant 1.000000e-01 : f64
    %0 = tensor.empty() : tensor<8xi1>
    %1 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : tensor<8xf32>) outs(%0 : tensor<8xi1>) {
    ^bb0(%in: f32, %out: i1):
      %w = arith.extf %in : f32 to f64
      %c = arith.cmpf oeq, %w, %ninf : f64
      linalg.yield %c : i1
    } -> tensor<8xi1>
    %2 = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]} ins(%arg0 : tensor<8xf32>) outs(%0 : tensor<8xi1>) {
    ^bb0(%in: f32, %out: i1):
      %w = arith.extf %in : f32 to f64
      %c = arith.cmpf olt, %w, %tenth : f64
      linalg.yield %c : i1
    } -> tensor<8xi1>
    return %1, %2 : tensor<8xi1>, tensor<8xi1>
  }
}
