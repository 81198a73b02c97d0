// Torch-dialect input lowered to linalg-on-tensors: by --emit, and by the named pass in a pipeline.
// RUN: uniorch-opt %s --split-input-file --emit linalg | FileCheck %s
// RUN: uniorch-opt %s --split-input-file -p uniorch-torch-to-linalg | FileCheck %s
// RUN: uniorch-opt %s --split-input-file -p 'uniorch-torch-to-linalg{allow-non-finites=false}' | FileCheck %s --check-prefix=FINITE
// RUN: uniorch-opt %s --split-input-file --emit torch | FileCheck %s --check-prefix=TORCH
// Locations in a later chunk name this file and its own line numbers.
// RUN: uniorch-opt %s --split-input-file --emit torch --mlir-print-debuginfo | FileCheck %s --check-prefix=DEBUG

// CHECK-NOT: torch.
// CHECK-LABEL: func.func @mm_relu(
// CHECK-SAME: %[[A:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK: %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[FILL:.*]] = linalg.fill ins(%[[ZERO]] : f32)
// CHECK: %[[MM:.*]] = linalg.matmul ins(%[[A]], %[[B]] : tensor<4x8xf32>, tensor<8x16xf32>) outs(%[[FILL]] : tensor<4x16xf32>)
// CHECK: %[[RELU:.*]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel"]} ins(%[[MM]] : tensor<4x16xf32>)
// CHECK: arith.cmpf ugt
// CHECK: arith.select
// CHECK: return %[[RELU]] : tensor<4x16xf32>
// TORCH-LABEL: func.func @mm_relu(
// TORCH: torch.aten.mm %{{.*}}, %{{.*}} : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
// TORCH: torch.aten.relu
// TORCH-NOT: linalg.
func.func @mm_relu(%a: !torch.vtensor<[4,8],f32>, %b: !torch.vtensor<[8,16],f32>) -> !torch.vtensor<[4,16],f32> {
  %0 = torch.aten.mm %a, %b : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
  %1 = torch.aten.relu %0 : !torch.vtensor<[4,16],f32> -> !torch.vtensor<[4,16],f32>
  return %1 : !torch.vtensor<[4,16],f32>
}

// -----

// CHECK-NOT: torch.
// CHECK-DAG: #[[ID:map[0-9]*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG: #[[ROW:map[0-9]*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @add_broadcast(
// CHECK: linalg.generic {indexing_maps = [#[[ID]], #[[ROW]], #[[ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME: ins(%{{.*}}, %{{.*}} : tensor<4x16xf32>, tensor<16xf32>)
// CHECK: arith.addf
// CHECK-NOT: torch.
// TORCH-LABEL: func.func @add_broadcast(
// TORCH: torch.aten.add.Tensor
func.func @add_broadcast(%a: !torch.vtensor<[4,16],f32>, %b: !torch.vtensor<[16],f32>) -> !torch.vtensor<[4,16],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.aten.add.Tensor %a, %b, %int1 : !torch.vtensor<[4,16],f32>, !torch.vtensor<[16],f32>, !torch.int -> !torch.vtensor<[4,16],f32>
  return %0 : !torch.vtensor<[4,16],f32>
}

// -----

// Softmax: the max reduction starts from -inf, or from the lowest finite float with
// allow-non-finites=false.
// CHECK-LABEL: func.func @softmax(
// CHECK: arith.constant 0xFF800000 : f32
// CHECK: iterator_types = ["parallel", "reduction"]
// CHECK: arith.maximumf
// CHECK: math.exp
// CHECK: iterator_types = ["parallel", "reduction"]
// CHECK: arith.addf
// CHECK: arith.divf
// CHECK-NOT: torch.
// FINITE-LABEL: func.func @softmax(
// FINITE-NOT: 0xFF800000
// FINITE: arith.constant -3.40282347E+38 : f32
// FINITE-NOT: 0xFF800000
// The backend contract decomposes softmax into torch ops.
// TORCH-LABEL: func.func @softmax(
// TORCH-NOT: torch.aten.softmax.int
// TORCH: torch.aten.max.dim
// TORCH: torch.aten.exp
// TORCH: torch.aten.sum.dim_IntList
// TORCH: torch.aten.div.Tensor
// DEBUG-LABEL: func.func @softmax(
// DEBUG: torch.aten.max.dim {{.*}} loc(#[[SOFTMAX:loc[0-9]+]])
// DEBUG: torch.aten.div.Tensor {{.*}} loc(#[[SOFTMAX]])
// DEBUG: #[[SOFTMAX]] = loc("{{.*}}torch-to-linalg.mlir":[[# @LINE + 4]]:8)
func.func @softmax(%a: !torch.vtensor<[2,8],f32>) -> !torch.vtensor<[2,8],f32> {
  %int1 = torch.constant.int 1
  %none = torch.constant.none
  %0 = torch.aten.softmax.int %a, %int1, %none : !torch.vtensor<[2,8],f32>, !torch.int, !torch.none -> !torch.vtensor<[2,8],f32>
  return %0 : !torch.vtensor<[2,8],f32>
}
