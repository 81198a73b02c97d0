// tensor.pad and tensor.concat each become a copy kernel; constants stay in @main.
// RUN: uniorch-opt %s -p 'uniorch-fuse' | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: arith.constant
// CHECK-NOT: uniorch
// CHECK: %[[PAD:.*]] = tensor.pad %arg0
// CHECK: {uniorch.domain = {parallel = [3, 8], reduction = []}, uniorch.group = 0 : i64, uniorch.kind = "copy"}
// CHECK: tensor.concat dim(0) %[[PAD]], %arg1 {uniorch.domain = {parallel = [5, 8], reduction = []}, uniorch.group = 1 : i64, uniorch.kind = "copy"}

module {
  func.func @main(%arg0: tensor<3x5xf32>, %arg1: tensor<2x8xf32>) -> tensor<5x8xf32> {
    %cst = arith.constant 0.000000e+00 : f32
    %padded = tensor.pad %arg0 low[0, 1] high[0, 2] {
    ^bb0(%arg2: index, %arg3: index):
      tensor.yield %cst : f32
    } : tensor<3x5xf32> to tensor<3x8xf32>
    %concat = tensor.concat dim(0) %padded, %arg1 : (tensor<3x8xf32>, tensor<2x8xf32>) -> tensor<5x8xf32>
    return %concat : tensor<5x8xf32>
  }
}
