// softmax(relu(a @ b)) in the torch dialect: two kernels after scheduling, a contraction (matmul
// + relu epilogue) and a reduction (the softmax rows), for the backend-stage tests.
func.func @main(%arg0: !torch.vtensor<[4,8],f32>, %arg1: !torch.vtensor<[8,16],f32>) -> !torch.vtensor<[4,16],f32> {
  %none = torch.constant.none
  %float1 = torch.constant.float 1.000000e+00
  %true = torch.constant.bool true
  %int-1 = torch.constant.int -1
  %0 = torch.aten.mm %arg0, %arg1 : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
  %1 = torch.aten.relu %0 : !torch.vtensor<[4,16],f32> -> !torch.vtensor<[4,16],f32>
  %values, %indices = torch.aten.max.dim %1, %int-1, %true : !torch.vtensor<[4,16],f32>, !torch.int, !torch.bool -> !torch.vtensor<[4,1],f32>, !torch.vtensor<[4,1],si64>
  %2 = torch.aten.sub.Tensor %1, %values, %float1 : !torch.vtensor<[4,16],f32>, !torch.vtensor<[4,1],f32>, !torch.float -> !torch.vtensor<[4,16],f32>
  %3 = torch.aten.exp %2 : !torch.vtensor<[4,16],f32> -> !torch.vtensor<[4,16],f32>
  %4 = torch.prim.ListConstruct %int-1 : (!torch.int) -> !torch.list<int>
  %5 = torch.aten.sum.dim_IntList %3, %4, %true, %none : !torch.vtensor<[4,16],f32>, !torch.list<int>, !torch.bool, !torch.none -> !torch.vtensor<[4,1],f32>
  %6 = torch.aten.div.Tensor %3, %5 : !torch.vtensor<[4,16],f32>, !torch.vtensor<[4,1],f32> -> !torch.vtensor<[4,16],f32>
  return %6 : !torch.vtensor<[4,16],f32>
}
