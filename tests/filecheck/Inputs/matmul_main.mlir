// relu(a @ b) as @main: one kernel after scheduling (a contraction with a relu epilogue), so a
// binary stage has exactly one file to write with -o.
func.func @main(%a: !torch.vtensor<[4,8],f32>, %b: !torch.vtensor<[8,16],f32>) -> !torch.vtensor<[4,16],f32> {
  %0 = torch.aten.mm %a, %b : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
  %1 = torch.aten.relu %0 : !torch.vtensor<[4,16],f32> -> !torch.vtensor<[4,16],f32>
  return %1 : !torch.vtensor<[4,16],f32>
}
