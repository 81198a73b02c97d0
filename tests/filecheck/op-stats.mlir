// uniorch-op-stats counts ops (stderr, IR unchanged) by op name, dialect, or model submodule; the
// submodule is the name of the op's NameLoc, as the importer writes it for captured models.
// RUN: uniorch-opt %s -p 'uniorch-op-stats{group-by=module},uniorch-torch-to-linalg,uniorch-op-stats{group-by=module}' -o /dev/null 2>&1 | FileCheck %s --check-prefix=MODULE
// RUN: uniorch-opt %s -p 'uniorch-torch-to-linalg,uniorch-op-stats{group-by=dialect},uniorch-op-stats' -o /dev/null 2>&1 | FileCheck %s --check-prefix=OPS
// Locations survive the lowering: each linalg op still names its submodule and source line.
// RUN: uniorch-opt %s --emit linalg --mlir-print-debuginfo | FileCheck %s --check-prefix=LOC

// MODULE-LABEL: // uniorch-op-stats (group-by=module)
// MODULE-NEXT: //   fc1     2
// MODULE-NEXT: //   <root>  1
// MODULE-NEXT: //   act     1
// MODULE-LABEL: // uniorch-op-stats (group-by=module)
// MODULE-NEXT: //   fc1     4
// MODULE-NEXT: //   <root>  1
// MODULE-NEXT: //   act     1
// MODULE-NOT: uniorch-op-stats

// OPS-LABEL: // uniorch-op-stats (group-by=dialect)
// OPS-NEXT: //   linalg  4
// OPS-NEXT: //   arith   1
// OPS-NEXT: //   tensor  1
// OPS-LABEL: // uniorch-op-stats (group-by=op)
// OPS-NEXT: //   linalg.generic  2
// OPS-NEXT: //   arith.constant  1
// OPS-NEXT: //   linalg.fill     1
// OPS-NEXT: //   linalg.matmul   1
// OPS-NEXT: //   tensor.empty    1
// OPS-NOT: uniorch-op-stats

// Locations of the .mlir text name the input file, not MLIR's anonymous buffer "-".
// LOC: #{{loc[0-9]+}} = loc("{{.*}}op-stats.mlir":[[# @LINE + 16]]:17)
// LOC: #[[LINE3:loc[0-9]+]] = loc("model.py":3:0)
// LOC: #[[LINE4:loc[0-9]+]] = loc("model.py":4:0)
// LOC: #[[FC1:loc[0-9]+]] = loc("fc1"(#[[LINE3]]))
// LOC: #[[ACT:loc[0-9]+]] = loc("act"(#[[LINE4]]))
// LOC: linalg.matmul {{.*}} loc(#[[FC1]])
// LOC: linalg.generic
// LOC: arith.addf {{.*}} loc(#[[FC1]])
// LOC: } -> tensor<4x16xf32> loc(#[[FC1]])
// LOC: linalg.generic
// LOC: arith.cmpf {{.*}} loc(#[[ACT]])
// LOC: } -> tensor<4x16xf32> loc(#[[ACT]])
// LOC: } loc(#[[FUNC:loc[0-9]+]])
// LOC: #[[FUNC]] = loc("{{.*}}op-stats.mlir":[[# @LINE + 3]]:1)
// LOC-NOT: "-"

func.func @main(%x: !torch.vtensor<[4,8],f32>, %w: !torch.vtensor<[8,16],f32>, %b: !torch.vtensor<[16],f32>) -> !torch.vtensor<[4,16],f32> {
  %int1 = torch.constant.int 1
  %0 = torch.aten.mm %x, %w : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32> loc("fc1"("model.py":3:0))
  %1 = torch.aten.add.Tensor %0, %b, %int1 : !torch.vtensor<[4,16],f32>, !torch.vtensor<[16],f32>, !torch.int -> !torch.vtensor<[4,16],f32> loc("fc1"("model.py":3:0))
  %2 = torch.aten.relu %1 : !torch.vtensor<[4,16],f32> -> !torch.vtensor<[4,16],f32> loc("act"("model.py":4:0))
  return %2 : !torch.vtensor<[4,16],f32>
}
