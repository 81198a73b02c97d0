// An ATen op torch-mlir imports but lowers nowhere (torch.linalg.eigvals) is a generic
// `torch.operator`; MLIR's legalization error alone does not say which op it is.
// RUN: not uniorch-opt %s --emit linalg 2>&1 | FileCheck %s

// CHECK-NOT: Traceback
// CHECK: {{.*}}unlowered-op.mlir:[[# @LINE + 5]]:10: error: failed to legalize operation 'torch.operator'
// CHECK-NEXT: {{.*}}unlowered-op.mlir:[[# @LINE + 4]]:10: note: aten.linalg_eig has no lowering to linalg;
// CHECK-SAME: uniorch.compile runs it in PyTorch
// CHECK-NEXT: {{.*}}unlowered-op.mlir:[[# @LINE + 2]]:10: note: see current operation
func.func @eigvals(%a: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[4],complex<f32>> {
  %0:2 = torch.operator "torch.aten.linalg_eig"(%a) : (!torch.vtensor<[4,4],f32>)
      -> (!torch.vtensor<[4],complex<f32>>, !torch.vtensor<[4,4],complex<f32>>)
  return %0#0 : !torch.vtensor<[4],complex<f32>>
}
