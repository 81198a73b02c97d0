// mlir-opt's IR printing and timing. Dumps and the report go to stderr; -o keeps the final module
// out of the checked stream.
// RUN: uniorch-opt %s -p 'uniorch-torch-to-linalg,func.func(canonicalize,cse),uniorch-verify-linalg' --print-ir-before=cse -o /dev/null 2>&1 | FileCheck %s --check-prefix=BEFORE
// RUN: uniorch-opt %s -p 'uniorch-torch-to-linalg,func.func(canonicalize,cse),uniorch-verify-linalg' --print-ir-before=uniorch-torch-to-linalg --print-ir-after=uniorch-torch-to-linalg -o /dev/null 2>&1 | FileCheck %s --check-prefix=AROUND
// RUN: uniorch-opt %s -p 'uniorch-torch-to-linalg,func.func(canonicalize,cse),uniorch-verify-linalg' --print-ir-after-all -o /dev/null 2>&1 | FileCheck %s --check-prefix=ALL
// RUN: uniorch-opt %s -p 'uniorch-torch-to-linalg,func.func(canonicalize,cse),uniorch-verify-linalg' --print-ir-after=canonicalize,uniorch-verify-linalg -o /dev/null 2>&1 | FileCheck %s --check-prefix=LIST
// RUN: uniorch-opt %s -p 'uniorch-torch-to-linalg,func.func(canonicalize,cse),uniorch-verify-linalg' --timing -o /dev/null 2>&1 | FileCheck %s --check-prefix=TIMING
// Without -o, the module goes to stdout and the dumps to stderr.
// RUN: uniorch-opt %s -p 'uniorch-torch-to-linalg' --print-ir-after-all 2>/dev/null | FileCheck %s --check-prefix=STDOUT

// (A leading CHECK-NOT never names text of the match that follows it: the Python FileCheck clone
// searches a CHECK-NOT up to the end of the next match, not its start as LLVM's FileCheck does.)

// BEFORE-NOT: Dump After
// BEFORE: // -----// IR Dump Before func.func(cse) //----- //
// BEFORE-NEXT: #map = affine_map
// BEFORE-NEXT: module {
// BEFORE: linalg.matmul
// BEFORE-NOT: IR Dump

// AROUND-NOT: Dump After
// AROUND: // -----// IR Dump Before uniorch-torch-to-linalg //----- //
// AROUND-NEXT: module {
// AROUND: torch.aten.mm
// AROUND-NOT: linalg.matmul
// AROUND: // -----// IR Dump After uniorch-torch-to-linalg //----- //
// AROUND-NOT: torch.aten
// AROUND: linalg.matmul
// AROUND-NOT: IR Dump

// ALL-NOT: Dump Before
// ALL: // -----// IR Dump After uniorch-torch-to-linalg //----- //
// ALL: linalg.matmul
// ALL: // -----// IR Dump After func.func(canonicalize) //----- //
// ALL: linalg.matmul
// ALL: // -----// IR Dump After func.func(cse) //----- //
// ALL: linalg.matmul
// ALL: // -----// IR Dump After uniorch-verify-linalg //----- //
// ALL: linalg.matmul
// ALL-NOT: IR Dump

// LIST-NOT: Dump Before
// LIST-NOT: After uniorch-torch-to-linalg
// LIST: // -----// IR Dump After func.func(canonicalize) //----- //
// LIST-NOT: After func.func(cse)
// LIST: // -----// IR Dump After uniorch-verify-linalg //----- //
// LIST-NOT: IR Dump

// TIMING: ... Execution time report ...
// TIMING: Total Execution Time: {{[0-9.]+}} seconds
// TIMING: ----Wall Time----  ----Name----
// TIMING-NEXT: {{[0-9.]+}} ({{ *[0-9.]+}}%)  parse
// TIMING-NEXT: {{[0-9.]+}} ({{ *[0-9.]+}}%)  uniorch-torch-to-linalg
// TIMING-NEXT: {{[0-9.]+}} ({{ *[0-9.]+}}%)  func.func(canonicalize)
// TIMING-NEXT: {{[0-9.]+}} ({{ *[0-9.]+}}%)  func.func(cse)
// TIMING-NEXT: {{[0-9.]+}} ({{ *[0-9.]+}}%)  uniorch-verify-linalg
// TIMING-NEXT: {{[0-9.]+}} (100.0%)  Total

// STDOUT-NOT: Dump
// STDOUT: module {
// STDOUT: linalg.matmul
// STDOUT-NOT: IR Dump
func.func @mm_relu(%a: !torch.vtensor<[4,8],f32>, %b: !torch.vtensor<[8,16],f32>) -> !torch.vtensor<[4,16],f32> {
  %0 = torch.aten.mm %a, %b : !torch.vtensor<[4,8],f32>, !torch.vtensor<[8,16],f32> -> !torch.vtensor<[4,16],f32>
  %1 = torch.aten.relu %0 : !torch.vtensor<[4,16],f32> -> !torch.vtensor<[4,16],f32>
  return %1 : !torch.vtensor<[4,16],f32>
}
