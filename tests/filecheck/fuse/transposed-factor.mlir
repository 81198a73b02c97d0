// A matmul's output returned and also read transposed by a second matmul as its factor (an
// attention backward: dO written for the out-projection's gradient, dOᵀ read by the keys-major
// chain). The transposed copy is the reader's to load through its index map: it joins the second
// matmul's group, and the first kernel writes its output once (it wrote dOᵀ beside dO).
// RUN: uniorch-opt %s -p 'uniorch-preprocess,uniorch-fuse' | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK: ins(%arg0, %arg1 : tensor<64x32xf32>, tensor<32x48xf32>) {{.*}}uniorch.group = 0 : i64, uniorch.kind = "contraction"
// CHECK: ins(%{{.*}} : tensor<64x48xf32>) outs(%{{.*}} : tensor<48x64xf32>) attrs =  {uniorch.group = 1 : i64}
// CHECK: uniorch.group = 1 : i64, uniorch.kind = "contraction"
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
func.func @main(%a: tensor<64x32xf32>, %b: tensor<32x48xf32>, %c: tensor<64x16xf32>) -> (tensor<64x48xf32>, tensor<48x16xf32>) {
  %cst = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<64x48xf32>
  %f0 = linalg.fill ins(%cst : f32) outs(%e0 : tensor<64x48xf32>) -> tensor<64x48xf32>
  %y = linalg.matmul ins(%a, %b : tensor<64x32xf32>, tensor<32x48xf32>) outs(%f0 : tensor<64x48xf32>) -> tensor<64x48xf32>
  %e1 = tensor.empty() : tensor<48x64xf32>
  %yt = linalg.generic {indexing_maps = [#tr, #id], iterator_types = ["parallel", "parallel"]} ins(%y : tensor<64x48xf32>) outs(%e1 : tensor<48x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<48x64xf32>
  %e2 = tensor.empty() : tensor<48x16xf32>
  %f2 = linalg.fill ins(%cst : f32) outs(%e2 : tensor<48x16xf32>) -> tensor<48x16xf32>
  %z = linalg.matmul ins(%yt, %c : tensor<48x64xf32>, tensor<64x16xf32>) outs(%f2 : tensor<48x16xf32>) -> tensor<48x16xf32>
  return %y, %z : tensor<64x48xf32>, tensor<48x16xf32>
}
