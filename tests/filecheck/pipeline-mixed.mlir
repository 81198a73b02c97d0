// One pipeline text mixing uniorch passes and upstream MLIR passes, anchored or not.
// RUN: uniorch-opt %s -p 'uniorch-torch-to-linalg,func.func(canonicalize,cse),uniorch-verify-linalg' | FileCheck %s
// The same, spelled with mlir-opt's builtin.module(...) anchor, reading stdin.
// RUN: uniorch-opt - -p 'builtin.module(uniorch-torch-to-linalg,func.func(canonicalize,cse),uniorch-verify-linalg)' < %s | FileCheck %s
// Upstream elementwise fusion after the uniorch lowering: add, relu, mul become one linalg.generic.
// RUN: uniorch-opt %s -p 'uniorch-torch-to-linalg,func.func(linalg-fuse-elementwise-ops),canonicalize,uniorch-verify-linalg' | FileCheck %s --check-prefix=FUSED
// --emit runs before the pipeline: the pipeline starts from linalg.
// RUN: uniorch-opt %s --emit linalg -p 'func.func(linalg-fuse-elementwise-ops)' | FileCheck %s --check-prefix=FUSED

// CHECK-LABEL: func.func @mlp_tail(
// CHECK-SAME: %[[X:.*]]: tensor<4x8xf32>, %[[W:.*]]: tensor<8x16xf32>, %[[B:.*]]: tensor<16xf32>) -> tensor<4x16xf32>
// CHECK: %[[MM:.*]] = linalg.matmul ins(%[[X]], %[[W]] : {{.*}})
// CHECK: %[[ADD:.*]] = linalg.generic {{.*}} ins(%[[MM]], %[[B]] : tensor<4x16xf32>, tensor<16xf32>)
// CHECK: arith.addf
// CHECK: %[[RELU:.*]] = linalg.generic {{.*}} ins(%[[ADD]] : tensor<4x16xf32>)
// CHECK: %[[SQ:.*]] = linalg.generic {{.*}} ins(%[[RELU]], %[[RELU]] : tensor<4x16xf32>, tensor<4x16xf32>)
// CHECK: arith.mulf
// CHECK: return %[[SQ]]
// CHECK-NOT: torch.

// FUSED-LABEL: func.func @mlp_tail(
// FUSED: %[[MM:.*]] = linalg.matmul
// FUSED: linalg.generic {{.*}} ins(%[[MM]], %{{.*}} : tensor<4x16xf32>, tensor<16xf32>)
// FUSED: arith.addf
// FUSED: arith.cmpf ugt
// FUSED: arith.select
// FUSED: arith.mulf
// FUSED: linalg.yield
// FUSED-NOT: linalg.generic
// FUSED: return
func.func @mlp_tail(%x: !torch.vtensor<[4,8],f32>, %w: !torch.vtensor<[8,16],f32>, %b: !torch.vtensor<[16],f32>) -> !torch.vtensor<[4,16],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.aten.mm %x, %w : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
  %1 = torch.aten.add.Tensor %0, %b, %int1 : !torch.vtensor<[4,16],f32>, !torch.vtensor<[16],f32>, !torch.int -> !torch.vtensor<[4,16],f32>
  %2 = torch.aten.relu %1 : !torch.vtensor<[4,16],f32> -> !torch.vtensor<[4,16],f32>
  %3 = torch.aten.mul.Tensor %2, %2 : !torch.vtensor<[4,16],f32>, !torch.vtensor<[4,16],f32> -> !torch.vtensor<[4,16],f32>
  return %3 : !torch.vtensor<[4,16],f32>
}
