// MLIR that parses but does not verify: the verifier's error and its note, at the op's line.
// RUN: not uniorch-opt %s 2>&1 | FileCheck %s

// CHECK-NOT: Traceback
// CHECK: {{.*}}verify-error.mlir:[[# @LINE + 5]]:3: error: type of return operand 0 ('tensor<4xf32>') doesn't match function result type ('tensor<8xf32>') in function @f
// CHECK-NEXT: {{.*}}verify-error.mlir:[[# @LINE + 4]]:3: note: see current operation: "func.return"(%arg0) : (tensor<4xf32>) -> ()
// CHECK-NOT: {{.}}
// The error comes before any output: nothing else is printed.
func.func @f(%a: tensor<4xf32>) -> tensor<8xf32> {
  return %a : tensor<4xf32>
}
