"""Contraction kernels (uniorch/codegen/contraction.py): tiled tl.dot with fused producers/epilogues.

Kernel functions are either written by hand in MLIR (docs/kernels.md §3) or taken from the
preprocessed linalg of a small torch function (its whole `@main` is one contraction group). Every
kernel runs in Triton's interpreter on fresh random inputs and is compared with eager PyTorch; a
few are also compiled for real GPU targets (CUDA sm_90, ROCm gfx942) without a GPU, down to the
TTIR (which must hold a `tt.dot`) and the target binary.
"""
import pytest
import torch
import torch.nn.functional as F
from torch_mlir import ir

from uniorch.codegen import CodegenError
from uniorch.codegen.contraction import choose_schedule, generate_contraction
from uniorch.ir import make_context, parse_module
from uniorch.runtime.loader import launch, load

ATTRS = 'attributes {uniorch.kernel, uniorch.kind = "contraction"}'
TOL32 = dict(rtol=1e-4, atol=1e-4)
TOL16 = dict(rtol=1e-2, atol=1e-2)


@pytest.fixture(scope="module")
def ctx():
    return make_context()


def kernel_of(text: str, ctx):
    """(module, kernel func op) of MLIR text holding one kernel function."""
    module = parse_module(text, ctx)
    return module, module.body.operations[0].operation


def from_torch(fn, *args):
    """(module, @main as a contraction kernel) from the preprocessed linalg of `fn(*args)`."""
    from uniorch.ir import to_mlir
    from uniorch.ir.stages import run_pipeline_text
    from uniorch.passes.preprocess import PIPELINE

    module = to_mlir(fn, args)
    run_pipeline_text(module, PIPELINE, "preprocess")
    main = module.body.operations[0].operation
    with module.context:
        main.attributes["uniorch.kernel"] = ir.UnitAttr.get()
        main.attributes["uniorch.kind"] = ir.StringAttr.get("contraction")
    return module, main


def run(func, inputs, outputs, target="interpret"):
    ks = generate_contraction(func, target)
    launch(ks, load(ks, interpret=True), inputs, outputs)
    return ks


# ---------------------------------------------------------------------------------------------
# hand-written kernels

MATMUL = """
#mA = affine_map<(d0, d1, d2) -> ({amap})>
#mB = affine_map<(d0, d1, d2) -> ({bmap})>
#mC = affine_map<(d0, d1, d2) -> (d0, d1)>
#mS = affine_map<(d0, d1) -> ()>
#mI = affine_map<(d0, d1) -> (d0, d1)>
func.func private @k0_matmul(%a: tensor<{ashape}xf32>, %b: tensor<{bshape}xf32>) -> tensor<{M}x{N}xf32> {attrs} {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{M}x{N}xf32>
  %z = linalg.generic {{indexing_maps = [#mS, #mI], iterator_types = ["parallel", "parallel"]}} ins(%zero : f32) outs(%e : tensor<{M}x{N}xf32>) {{
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }} -> tensor<{M}x{N}xf32> loc("model.py":3:0)
  %r = linalg.generic {{indexing_maps = [#mA, #mB, #mC], iterator_types = ["parallel", "parallel", "reduction"]}} ins(%a, %b : tensor<{ashape}xf32>, tensor<{bshape}xf32>) outs(%z : tensor<{M}x{N}xf32>) {{
  ^bb0(%x: f32, %y: f32, %o: f32):
    %p = arith.mulf %x, %y : f32
    %q = arith.addf %o, %p : f32
    linalg.yield %q : f32
  }} -> tensor<{M}x{N}xf32> loc("model.py":3:0)
  return %r : tensor<{M}x{N}xf32>
}}
"""


def matmul_text(M, N, K, trans_b=False):
    return MATMUL.format(M=M, N=N, attrs=ATTRS, amap="d0, d2", ashape=f"{M}x{K}",
                         bmap="d1, d2" if trans_b else "d2, d1", bshape=f"{N}x{K}" if trans_b else f"{K}x{N}")


@pytest.mark.parametrize("M,N,K", [(17, 33, 65), (1, 1, 1), (3, 70, 5), (70, 130, 20)])
def test_matmul_any_size(ctx, M, N, K):
    _, f = kernel_of(matmul_text(M, N, K), ctx)
    a, b = torch.randn(M, K), torch.randn(K, N)
    c = torch.empty(M, N)
    ks = run(f, [a, b], [c])
    torch.testing.assert_close(c, a @ b, **TOL32)
    assert "tl.dot(" in ks.source and 'input_precision="ieee"' in ks.source
    assert ks.fn_name == "k0_matmul" and "model.py" in ks.source


def test_recorded_schedule_grouped_tile_order(ctx):
    """A `uniorch.schedule` recorded on the kernel is used; several tile rows take the grouped
    (L2-friendly) program order."""
    _, f = kernel_of(matmul_text(70, 50, 20), ctx)
    with ctx:
        i64 = ir.IntegerType.get_signless(64)
        f.attributes["uniorch.schedule"] = ir.DictAttr.get({
            k: ir.IntegerAttr.get(i64, v) for k, v in
            dict(block_m=16, block_n=16, block_k=16, group_m=2, num_warps=1, num_stages=1).items()})
    a, b = torch.randn(70, 20), torch.randn(20, 50)
    c = torch.empty(70, 50)
    ks = run(f, [a, b], [c])
    torch.testing.assert_close(c, a @ b, **TOL32)
    assert ks.constexprs == {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2}
    assert ks.grid == (5 * 4, 1, 1) and "group_size_m" in ks.source


def test_matmul_transposed_b_and_strided_views(ctx):
    """nn.Linear's weight [N, K] read through the indexing map; operands are non-contiguous views."""
    M, N, K = 19, 24, 40
    _, f = kernel_of(matmul_text(M, N, K, trans_b=True), ctx)
    a = torch.randn(K, M).t()                 # strides (1, M)
    w = torch.randn(N, 2 * K)[:, ::2]         # strides (2K, 2)
    c = torch.empty(N, M).t()                 # the output is a transposed view too
    run(f, [a, w], [c])
    torch.testing.assert_close(c, a @ w.t(), **TOL32)


def test_matmul_accumulates_into_input_tensor(ctx):
    """The accumulator starts from a real tensor (the contraction's outs is a kernel input)."""
    text = matmul_text(23, 17, 30).replace(
        "-> tensor<23x17xf32> {", "-> tensor<23x17xf32> {", 1).replace(
        "%b: tensor<30x17xf32>)", "%b: tensor<30x17xf32>, %c: tensor<23x17xf32>)").replace(
        "ins(%a, %b : tensor<23x30xf32>, tensor<30x17xf32>) outs(%z", "ins(%a, %b : tensor<23x30xf32>, tensor<30x17xf32>) outs(%c")
    _, f = kernel_of(text, ctx)
    a, b, c0 = torch.randn(23, 30), torch.randn(30, 17), torch.randn(23, 17)
    c = torch.empty(23, 17)
    run(f, [a, b, c0], [c])
    torch.testing.assert_close(c, c0 + a @ b, **TOL32)


CAUSAL = """
#mQ = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
#mK = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3, d4)>
#mO = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
#mF = affine_map<(d0, d1, d2, d3) -> ()>
#mI = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func private @k5_causal_scores(%q: tensor<2x3x10x16xf32>, %k: tensor<2x3x12x16xf32>) -> tensor<2x3x10x12xf32> {attrs} {{
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %scale = arith.constant 0.25 : f32
  %e = tensor.empty() : tensor<2x3x10x12xf32>
  %z = linalg.generic {{indexing_maps = [#mF, #mI], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins(%zero : f32) outs(%e : tensor<2x3x10x12xf32>) {{
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }} -> tensor<2x3x10x12xf32>
  %s = linalg.generic {{indexing_maps = [#mQ, #mK, #mO], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}} ins(%q, %k : tensor<2x3x10x16xf32>, tensor<2x3x12x16xf32>) outs(%z : tensor<2x3x10x12xf32>) {{
  ^bb0(%x: f32, %y: f32, %o: f32):
    %p = arith.mulf %x, %y : f32
    %r = arith.addf %o, %p : f32
    linalg.yield %r : f32
  }} -> tensor<2x3x10x12xf32>
  %m = linalg.generic {{indexing_maps = [#mI, #mI], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins(%s : tensor<2x3x10x12xf32>) outs(%e : tensor<2x3x10x12xf32>) {{
  ^bb0(%in: f32, %out: f32):
    %i = linalg.index 2 : index
    %j = linalg.index 3 : index
    %c = arith.cmpi sgt, %j, %i : index
    %x = arith.mulf %in, %scale : f32
    %r = arith.select %c, %ninf, %x : f32
    linalg.yield %r : f32
  }} -> tensor<2x3x10x12xf32>
  return %m : tensor<2x3x10x12xf32>
}}
"""


def test_causal_scores_linalg_index_two_batch_dims(ctx):
    """q @ k^T (k transposed through its map), batch = B x H on the grid, causal mask from
    linalg.index in the epilogue."""
    _, f = kernel_of(CAUSAL.format(attrs=ATTRS), ctx)
    q, k = torch.randn(2, 3, 10, 16), torch.randn(2, 3, 12, 16)
    out = torch.empty(2, 3, 10, 12)
    run(f, [q, k], [out])
    ref = (q @ k.transpose(-1, -2) * 0.25).masked_fill(torch.ones(10, 12).triu(1).bool(), float("-inf"))
    torch.testing.assert_close(out, ref, **TOL32)


RESIDUAL = """
#mA = affine_map<(d0, d1, d2) -> (d0, d2)>
#mB = affine_map<(d0, d1, d2) -> (d2, d1)>
#mC = affine_map<(d0, d1, d2) -> (d0, d1)>
#mS = affine_map<(d0, d1) -> ()>
#mI = affine_map<(d0, d1) -> (d0, d1)>
#mT = affine_map<(d0, d1) -> (d1, d0)>
#mR = affine_map<(d0, d1) -> (d1)>
func.func private @k4_mlp(%x: tensor<21x36xf32>, %w: tensor<18x36xf32>, %bias: tensor<18xf32>, %res: tensor<21x18xf32>) -> (tensor<21x18xf32>, tensor<21x18xf32>) {attrs} {{
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %half = arith.constant 0.5 : f32
  %c1 = arith.constant 0.79788456080286541 : f64
  %c2 = arith.constant 4.471500e-02 : f64
  %et = tensor.empty() : tensor<36x18xf32>
  %wt = linalg.generic {{indexing_maps = [#mT, #mI], iterator_types = ["parallel", "parallel"]}} ins(%w : tensor<18x36xf32>) outs(%et : tensor<36x18xf32>) {{
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }} -> tensor<36x18xf32> loc("mlp.py":10:0)
  %e = tensor.empty() : tensor<21x18xf32>
  %z = linalg.generic {{indexing_maps = [#mS, #mI], iterator_types = ["parallel", "parallel"]}} ins(%zero : f32) outs(%e : tensor<21x18xf32>) {{
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }} -> tensor<21x18xf32> loc("mlp.py":10:0)
  %r = linalg.generic {{indexing_maps = [#mA, #mB, #mC], iterator_types = ["parallel", "parallel", "reduction"]}} ins(%x, %wt : tensor<21x36xf32>, tensor<36x18xf32>) outs(%z : tensor<21x18xf32>) {{
  ^bb0(%a: f32, %b: f32, %o: f32):
    %p = arith.mulf %a, %b : f32
    %q = arith.addf %o, %p : f32
    linalg.yield %q : f32
  }} -> tensor<21x18xf32> loc("mlp.py":10:0)
  // gelu(tanh) of (r + bias), then silu, then + residual: three fused epilogue generics
  %g = linalg.generic {{indexing_maps = [#mI, #mR, #mI], iterator_types = ["parallel", "parallel"]}} ins(%r, %bias : tensor<21x18xf32>, tensor<18xf32>) outs(%e : tensor<21x18xf32>) {{
  ^bb0(%in: f32, %bi: f32, %out: f32):
    %0 = arith.addf %in, %bi : f32
    %1 = arith.mulf %0, %half : f32
    %2 = arith.mulf %0, %0 : f32
    %3 = arith.mulf %2, %0 : f32
    %4 = arith.truncf %c2 : f64 to f32
    %5 = arith.mulf %3, %4 : f32
    %6 = arith.addf %0, %5 : f32
    %7 = arith.truncf %c1 : f64 to f32
    %8 = arith.mulf %6, %7 : f32
    %9 = math.tanh %8 : f32
    %10 = arith.addf %9, %one : f32
    %11 = arith.mulf %1, %10 : f32
    linalg.yield %11 : f32
  }} -> tensor<21x18xf32> loc("mlp.py":11:0)
  %s = linalg.generic {{indexing_maps = [#mI, #mI], iterator_types = ["parallel", "parallel"]}} ins(%g : tensor<21x18xf32>) outs(%e : tensor<21x18xf32>) {{
  ^bb0(%in: f32, %out: f32):
    %0 = arith.negf %in : f32
    %1 = math.exp %0 : f32
    %2 = arith.addf %1, %one : f32
    %3 = arith.divf %in, %2 : f32
    linalg.yield %3 : f32
  }} -> tensor<21x18xf32> loc("mlp.py":12:0)
  %o = linalg.generic {{indexing_maps = [#mI, #mI, #mI], iterator_types = ["parallel", "parallel"]}} ins(%s, %res : tensor<21x18xf32>, tensor<21x18xf32>) outs(%e : tensor<21x18xf32>) {{
  ^bb0(%in: f32, %rr: f32, %out: f32):
    %0 = arith.addf %in, %rr : f32
    linalg.yield %0 : f32
  }} -> tensor<21x18xf32> loc("mlp.py":13:0)
  return %r, %o : tensor<21x18xf32>, tensor<21x18xf32>
}}
"""


def test_epilogue_chain_residual_and_raw_result(ctx):
    """Transpose producer, bias + tanh-GELU + SiLU + residual epilogue; raw product also a result."""
    _, f = kernel_of(RESIDUAL.format(attrs=ATTRS), ctx)
    x, w, bias, res = torch.randn(21, 36), torch.randn(18, 36), torch.randn(18), torch.randn(21, 18)
    raw, out = torch.empty(21, 18), torch.empty(21, 18)
    ks = run(f, [x, w, bias, res], [raw, out])
    ref = x @ w.t()
    torch.testing.assert_close(raw, ref, **TOL32)
    torch.testing.assert_close(out, F.silu(F.gelu(ref + bias, approximate="tanh")) + res, **TOL32)
    for line in ("mlp.py\":11:0", "mlp.py\":12:0", "mlp.py\":13:0"):
        assert line in ks.source  # each fused op's location is in the source


LN_PROLOGUE = """
#mX = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#mS = affine_map<(d0, d1, d2, d3) -> (d0, d1, 0)>
#mG = affine_map<(d0, d1, d2, d3) -> (d3)>
#mW = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
#mO = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#mF = affine_map<(d0, d1, d2) -> ()>
#mI = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
func.func private @k2_ln_linear(%x: tensor<2x9x24xf32>, %sum: tensor<2x9x1xf32>, %var: tensor<2x9x1xf64>, %g: tensor<24xf32>, %b: tensor<24xf32>, %w: tensor<24x20xf32>) -> tensor<2x9x20xf32> {attrs} {{
  %zero = arith.constant 0.0 : f32
  %n64 = arith.constant 24.0 : f64
  %n32 = arith.constant 24.0 : f32
  %eps = arith.constant 1.0e-05 : f64
  %e = tensor.empty() : tensor<2x9x20xf32>
  %z = linalg.generic {{indexing_maps = [#mF, #mI], iterator_types = ["parallel", "parallel", "parallel"]}} ins(%zero : f32) outs(%e : tensor<2x9x20xf32>) {{
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }} -> tensor<2x9x20xf32>
  // LayerNorm normalisation fused into the matmul's body by linalg-fuse-elementwise-ops (as GPT-2's)
  %r = linalg.generic {{indexing_maps = [#mX, #mS, #mS, #mG, #mG, #mW, #mO], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}} ins(%x, %sum, %var, %g, %b, %w : tensor<2x9x24xf32>, tensor<2x9x1xf32>, tensor<2x9x1xf64>, tensor<24xf32>, tensor<24xf32>, tensor<24x20xf32>) outs(%z : tensor<2x9x20xf32>) {{
  ^bb0(%in: f32, %s: f32, %v: f64, %gi: f32, %bi: f32, %wi: f32, %out: f32):
    %0 = arith.divf %v, %n64 : f64
    %1 = arith.truncf %0 : f64 to f32
    %2 = arith.truncf %eps : f64 to f32
    %3 = arith.addf %1, %2 : f32
    %4 = math.rsqrt %3 : f32
    %5 = arith.divf %s, %n32 : f32
    %6 = arith.subf %in, %5 : f32
    %7 = arith.mulf %6, %4 : f32
    %8 = arith.mulf %7, %gi : f32
    %9 = arith.addf %8, %bi : f32
    %10 = arith.mulf %9, %wi : f32
    %11 = arith.addf %out, %10 : f32
    linalg.yield %11 : f32
  }} -> tensor<2x9x20xf32> loc("gpt2.py":7:0)
  return %r : tensor<2x9x20xf32>
}}
"""


def test_prologue_layernorm_in_contraction_body(ctx):
    """3-D x 2-D matmul (M = 2x9 flattened) whose A operand is a LayerNorm computed per tile."""
    _, f = kernel_of(LN_PROLOGUE.format(attrs=ATTRS), ctx)
    x, g, b, w = torch.randn(2, 9, 24), torch.randn(24), torch.randn(24), torch.randn(24, 20)
    s = x.sum(-1, keepdim=True)
    var = ((x.double() - x.double().mean(-1, keepdim=True)) ** 2).sum(-1, keepdim=True)
    out = torch.empty(2, 9, 20)
    ks = run(f, [x, s, var, g, b, w], [out])
    torch.testing.assert_close(out, F.layer_norm(x, (24,), g, b) @ w, **TOL32)
    # per-row statistics do not depend on K: computed once, before the K loop
    pre, loop = ks.source.split("for k0 in range")
    assert "tl.rsqrt" in pre and "tl.rsqrt" not in loop


BMM16 = """
#mA = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
#mB = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
#mC = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
#mF = affine_map<(d0, d1, d2) -> ()>
#mI = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
#mR = affine_map<(d0, d1, d2) -> (d2)>
func.func private @k1_bmm_{dt}(%a: tensor<3x20x40x{dt}>, %b: tensor<3x40x24x{dt}>, %bias: tensor<24x{out}>) -> tensor<3x20x24x{out}> {attrs} {{
  %zero = arith.constant 0.0 : {acc}
  %e = tensor.empty() : tensor<3x20x24x{acc}>
  %eo = tensor.empty() : tensor<3x20x24x{out}>
  %z = linalg.generic {{indexing_maps = [#mF, #mI], iterator_types = ["parallel", "parallel", "parallel"]}} ins(%zero : {acc}) outs(%e : tensor<3x20x24x{acc}>) {{
  ^bb0(%in: {acc}, %o: {acc}):
    linalg.yield %in : {acc}
  }} -> tensor<3x20x24x{acc}>
  %r = linalg.generic {{indexing_maps = [#mA, #mB, #mC], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}} ins(%a, %b : tensor<3x20x40x{dt}>, tensor<3x40x24x{dt}>) outs(%z : tensor<3x20x24x{acc}>) {{
  ^bb0(%x: {dt}, %y: {dt}, %o: {acc}):
    {body}
  }} -> tensor<3x20x24x{acc}>
  %s = linalg.generic {{indexing_maps = [#mI, #mR, #mI], iterator_types = ["parallel", "parallel", "parallel"]}} ins(%r, %bias : tensor<3x20x24x{acc}>, tensor<24x{out}>) outs(%eo : tensor<3x20x24x{out}>) {{
  ^bb0(%in: {acc}, %bi: {out}, %o: {out}):
    {epi}
  }} -> tensor<3x20x24x{out}>
  return %s : tensor<3x20x24x{out}>
}}
"""


@pytest.mark.parametrize("dt,widen", [("f16", True), ("bf16", True), ("f16", False), ("bf16", False)])
def test_16bit_batch_matmul_fp32_accumulation(ctx, dt, widen):
    """f16/bf16 operands: extf'd to f32 in the body (f32 result), or an all-f16 body (f16 result)."""
    if widen:
        body = (f"%xf = arith.extf %x : {dt} to f32\n    %yf = arith.extf %y : {dt} to f32\n"
                "    %p = arith.mulf %xf, %yf : f32\n    %q = arith.addf %o, %p : f32\n    linalg.yield %q : f32")
        epi = "%0 = arith.addf %in, %bi : f32\n    %1 = arith.maximumf %0, %o : f32\n    linalg.yield %0 : f32"
        acc = out = "f32"
    else:
        body = f"%p = arith.mulf %x, %y : {dt}\n    %q = arith.addf %o, %p : {dt}\n    linalg.yield %q : {dt}"
        epi = f"%0 = arith.addf %in, %bi : {dt}\n    linalg.yield %0 : {dt}"
        acc = out = dt
    text = BMM16.format(dt=dt, acc=acc, out=out, body=body, epi=epi, attrs=ATTRS)
    _, f = kernel_of(text, ctx)
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[dt]
    odt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[out]
    # unit-scale outputs, so that one 16-bit rounding step of the product stays within 1e-2
    a, b = (torch.randn(3, 20, 40) * 0.3).to(tdt), (torch.randn(3, 40, 24) * 0.3).to(tdt)
    bias = torch.randn(24, dtype=odt)
    c = torch.empty(3, 20, 24, dtype=odt)
    ks = run(f, [a, b, bias], [c])
    ref = torch.bmm(a.float(), b.float())
    ref = (ref + bias.float()) if widen else (ref.to(odt) + bias)
    # An all-bf16 result and its reference are each rounded twice to bf16 (product, then + bias):
    # they may differ by one bf16 ulp (2**-7 relative), more than 1e-2 near magnitude 2.
    tol = dict(rtol=2e-2, atol=2e-2) if (dt, widen) == ("bf16", False) else TOL16
    torch.testing.assert_close(c.float(), ref.float(), **tol)
    assert ks.grid[1] == 3  # batch on grid axis 1
    # on GPU targets the 16-bit tiles go to tl.dot as they are (fp32 accumulator)
    gpu = generate_contraction(f, "cuda").source
    assert 'input_precision="ieee"' not in gpu and "tl.float32)" in gpu


# ---------------------------------------------------------------------------------------------
# convolutions (implicit GEMM)

GROUPED_CONV = """
#mX = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d5, d3 * 2 + d6, d4 + d7 * 2)>
#mW = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d1, d2, d5, d6, d7)>
#mO = affine_map<(d0, d1, d2, d3, d4, d5, d6, d7) -> (d0, d1, d2, d3, d4)>
#mB = affine_map<(d0, d1, d2, d3, d4) -> (d1, d2)>
#mI = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3, d4)>
func.func private @k7_grouped_conv(%x: tensor<2x2x3x11x12xf32>, %w: tensor<2x5x3x3x3xf32>, %bias: tensor<2x5xf32>) -> tensor<2x2x5x5x8xf32> {attrs} {{
  %e = tensor.empty() : tensor<2x2x5x5x8xf32>
  %init = linalg.generic {{indexing_maps = [#mB, #mI], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]}} ins(%bias : tensor<2x5xf32>) outs(%e : tensor<2x2x5x5x8xf32>) {{
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }} -> tensor<2x2x5x5x8xf32>
  %r = linalg.generic {{indexing_maps = [#mX, #mW, #mO], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}} ins(%x, %w : tensor<2x2x3x11x12xf32>, tensor<2x5x3x3x3xf32>) outs(%init : tensor<2x2x5x5x8xf32>) {{
  ^bb0(%a: f32, %b: f32, %o: f32):
    %p = arith.mulf %a, %b : f32
    %q = arith.addf %o, %p : f32
    linalg.yield %q : f32
  }} -> tensor<2x2x5x5x8xf32> loc("conv.py":5:0)
  return %r : tensor<2x2x5x5x8xf32>
}}
"""

DEPTHWISE = """
#mX = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d3, d1 + d4, d2 + d5)>
#mW = affine_map<(d0, d1, d2, d3, d4, d5) -> (d3, d4, d5)>
#mO = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d3, d1, d2)>
#mF = affine_map<(d0, d1, d2, d3) -> ()>
#mI = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func private @k8_depthwise(%x: tensor<2x6x9x9xf32>, %w: tensor<6x3x3xf32>) -> tensor<2x6x7x7xf32> {attrs} {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x6x7x7xf32>
  %z = linalg.generic {{indexing_maps = [#mF, #mI], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}} ins(%zero : f32) outs(%e : tensor<2x6x7x7xf32>) {{
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  }} -> tensor<2x6x7x7xf32>
  %r = linalg.generic {{indexing_maps = [#mX, #mW, #mO], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}} ins(%x, %w : tensor<2x6x9x9xf32>, tensor<6x3x3xf32>) outs(%z : tensor<2x6x7x7xf32>) {{
  ^bb0(%a: f32, %b: f32, %o: f32):
    %p = arith.mulf %a, %b : f32
    %q = arith.addf %o, %p : f32
    linalg.yield %q : f32
  }} -> tensor<2x6x7x7xf32>
  return %r : tensor<2x6x7x7xf32>
}}
"""


def test_grouped_conv_stride_dilation_bias_init(ctx):
    """conv_2d_ngchw_gfchw generalised: groups = batch, M = N*OH*OW, N = F, K = C*KH*KW."""
    _, f = kernel_of(GROUPED_CONV.format(attrs=ATTRS), ctx)
    x, w, bias = torch.randn(2, 6, 11, 12), torch.randn(10, 3, 3, 3), torch.randn(10)
    out = torch.empty(2, 10, 5, 8)
    run(f, [x.view(2, 2, 3, 11, 12), w.view(2, 5, 3, 3, 3), bias.view(2, 5)], [out.view(2, 2, 5, 5, 8)])
    ref = F.conv2d(x, w, bias, stride=(2, 1), dilation=(1, 2), groups=2)
    torch.testing.assert_close(out, ref, **TOL32)


def test_depthwise_conv(ctx):
    _, f = kernel_of(DEPTHWISE.format(attrs=ATTRS), ctx)
    x, w = torch.randn(2, 6, 9, 9), torch.randn(6, 1, 3, 3)
    out = torch.empty(2, 6, 7, 7)
    run(f, [x, w.view(6, 3, 3)], [out])
    torch.testing.assert_close(out, F.conv2d(x, w, groups=6), **TOL32)


# ---------------------------------------------------------------------------------------------
# kernels from real preprocessed IR (torch -> torch-mlir -> uniorch-preprocess)


def test_real_linear_bias_gelu():
    """F.linear + exact GELU: transpose producer of the weight, bias + erf-GELU epilogue."""
    x, w, b = torch.randn(13, 40), torch.randn(30, 40), torch.randn(30)
    _, main = from_torch(lambda x, w, b: F.gelu(F.linear(x, w, b)), x, w, b)
    x, w, b = torch.randn(13, 40), torch.randn(30, 40), torch.randn(30)  # fresh values
    out = torch.empty(13, 30)
    ks = run(main, [x, w, b], [out])
    torch.testing.assert_close(out, F.gelu(F.linear(x, w, b)), **TOL32)
    assert "tl.erf" in ks.source


def test_real_addmm_same_input_both_sides():
    """addmm(beta*x, w, w.t()): one tensor is both A and (transposed) B; residual epilogue."""
    x, w = torch.randn(11, 11), torch.randn(11, 18)
    fn = lambda x, w: torch.addmm(x, w, w.t(), beta=0.5)  # noqa: E731
    _, main = from_torch(fn, x, w)
    x, w = torch.randn(11, 11), torch.randn(11, 18)
    out = torch.empty(11, 11)
    run(main, [x, w], [out])
    torch.testing.assert_close(out, fn(x, w), **TOL32)


def test_real_attention_scores_scale():
    """q @ k^T * scale on [B, H, S, D]: batch matmul with a transposed-K producer, scale epilogue."""
    q, k = torch.randn(2, 3, 10, 16), torch.randn(2, 3, 12, 16)
    fn = lambda q, k: (q @ k.transpose(-1, -2)) * 0.25  # noqa: E731
    _, main = from_torch(fn, q, k)
    q, k = torch.randn(2, 3, 10, 16), torch.randn(2, 3, 12, 16)
    out = torch.empty(2, 3, 10, 12)
    ks = run(main, [q, k], [out])
    torch.testing.assert_close(out, fn(q, k), **TOL32)
    assert ks.grid[1] == 6


def test_real_transposed_epilogue():
    """(p @ v).transpose(1, 2) * 2: the epilogue permutes the output; stores follow its layout."""
    fn = lambda p, v: (p @ v).transpose(1, 2) * 2.0  # noqa: E731
    _, main = from_torch(fn, torch.randn(2, 3, 5, 7), torch.randn(2, 3, 7, 4))
    p, v = torch.randn(2, 3, 5, 7), torch.randn(2, 3, 7, 4)
    out = torch.empty(2, 5, 3, 4)
    run(main, [p, v], [out])
    torch.testing.assert_close(out, fn(p, v), **TOL32)


def test_real_tanh_then_half_epilogue():
    """3-D @ 2-D matmul, tanh and a cast to f16 in the epilogue (f16 result)."""
    fn = lambda x, w: torch.tanh(x @ w).half()  # noqa: E731
    _, main = from_torch(fn, torch.randn(2, 5, 7), torch.randn(7, 4))
    x, w = torch.randn(2, 5, 7) * 0.3, torch.randn(7, 4)
    out = torch.empty(2, 5, 4, dtype=torch.float16)
    run(main, [x, w], [out])
    torch.testing.assert_close(out, fn(x, w), rtol=2e-3, atol=1e-3)


def test_real_conv2d_bias_relu_stride_padding_dilation():
    """F.conv2d(stride 2, padding 1, dilation 2) + bias + ReLU; padding stays a glue op (tensor.pad),
    so the kernel reads the padded input."""
    fn = lambda xp, w, b: F.relu(F.conv2d(xp, w, b, stride=2, dilation=2))  # noqa: E731
    x, w, b = torch.randn(2, 3, 13, 11), torch.randn(5, 3, 3, 3), torch.randn(5)
    _, main = from_torch(fn, F.pad(x, (1, 1, 1, 1)), w, b)
    x, w, b = torch.randn(2, 3, 13, 11), torch.randn(5, 3, 3, 3), torch.randn(5)
    out = torch.empty(2, 5, 6, 5)
    ks = run(main, [F.pad(x, (1, 1, 1, 1)), w, b], [out])
    torch.testing.assert_close(out, F.relu(F.conv2d(x, w, b, stride=2, padding=1, dilation=2)), **TOL32)
    assert "tl.dot(" in ks.source


# ---------------------------------------------------------------------------------------------
# real GPU targets (compiled without a GPU)


@pytest.mark.parametrize("which", ["cuda", "rocm"])
def test_compiles_for_gpu_targets(ctx, which):
    import triton
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", 90, 32) if which == "cuda" else GPUTarget("hip", "gfx942", 64)
    text = BMM16.format(dt="f16", acc="f32", out="f32", attrs=ATTRS,
                        body="%xf = arith.extf %x : f16 to f32\n    %yf = arith.extf %y : f16 to f32\n"
                             "    %p = arith.mulf %xf, %yf : f32\n    %q = arith.addf %o, %p : f32\n"
                             "    linalg.yield %q : f32",
                        epi="%0 = arith.addf %in, %bi : f32\n    linalg.yield %0 : f32")
    kernels = [kernel_of(t, ctx) for t in (text, GROUPED_CONV.format(attrs=ATTRS), CAUSAL.format(attrs=ATTRS),
                                           RESIDUAL.format(attrs=ATTRS), matmul_text(300, 200, 64))]
    for _module, f in kernels:  # the module owns the op: keep it alive
        ks = generate_contraction(f, which)
        src = triton.compiler.ASTSource(load(ks, interpret=False), signature=ks.signature(), constexprs=ks.constexprs)
        compiled = triton.compile(src, target=target, options={"num_warps": ks.num_warps, "num_stages": ks.num_stages})
        assert "tt.dot" in compiled.asm["ttir"]


def test_supports_every_contraction_fusion_groups():
    """What patterns.is_contraction (fusion) calls a contraction, this template takes; it also takes
    convolutions (affine window maps)."""
    from uniorch.codegen import patterns
    from uniorch.codegen.contraction import supports

    cases = [
        (lambda x, w: F.linear(x, w), torch.randn(3, 5), torch.randn(4, 5)),
        (lambda q, k: q @ k.transpose(-1, -2), torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8)),
        (lambda x, w: F.conv2d(x, w, stride=2), torch.randn(1, 2, 7, 7), torch.randn(3, 2, 3, 3)),
    ]
    for fn, *args in cases:
        module, main = from_torch(fn, *args)
        gens = [op.operation for op in main.regions[0].blocks[0].operations if op.operation.name == "linalg.generic"]
        red = [g for g in gens if "reduction" in str(g.attributes["iterator_types"])]
        assert len(red) == 1 and supports(red[0])
        for g in gens:
            if patterns.is_contraction(g):
                assert supports(g)


def test_schedule_depends_on_target(ctx):
    _, f = kernel_of(matmul_text(300, 200, 64), ctx)
    interp, cuda, rocm = (choose_schedule(f, t) for t in ("interpret", "cuda:sm_90", "rocm:gfx942"))
    assert max(interp["block_m"], interp["block_n"], interp["block_k"]) <= 64 and interp["num_stages"] == 1
    assert cuda["num_warps"] > rocm["num_warps"]  # same tile, 32- vs 64-wide warps
    for s in (interp, cuda, rocm):
        assert s["grid"] == [-(-300 // s["block_m"]) * -(-200 // s["block_n"]), 1, 1]
        assert min(s["block_m"], s["block_n"], s["block_k"]) >= 16


# ---------------------------------------------------------------------------------------------
# refusals: never a kernel on a guess

NOT_A_PRODUCT = """
#m0 = affine_map<(d0, d1) -> (d0, d1)>
#m1 = affine_map<(d0, d1) -> (d0)>
func.func private @k9_rowsum(%a: tensor<4x8xf32>, %init: tensor<4xf32>) -> tensor<4xf32> {attrs} {{
  %r = linalg.generic {{indexing_maps = [#m0, #m1], iterator_types = ["parallel", "reduction"]}} ins(%a : tensor<4x8xf32>) outs(%init : tensor<4xf32>) {{
  ^bb0(%x: f32, %o: f32):
    %q = arith.addf %o, %x : f32
    linalg.yield %q : f32
  }} -> tensor<4xf32>
  return %r : tensor<4xf32>
}}
"""

SUM_OF_SQUARES = """
#m0 = affine_map<(d0, d1) -> (d0, d1)>
#m1 = affine_map<(d0, d1) -> (d0)>
func.func private @k10_sumsq(%a: tensor<4x8xf32>, %init: tensor<4xf32>) -> tensor<4xf32> {attrs} {{
  %r = linalg.generic {{indexing_maps = [#m0, #m0, #m1], iterator_types = ["parallel", "reduction"]}} ins(%a, %a : tensor<4x8xf32>, tensor<4x8xf32>) outs(%init : tensor<4xf32>) {{
  ^bb0(%x: f32, %y: f32, %o: f32):
    %p = arith.mulf %x, %y : f32
    %q = arith.addf %o, %p : f32
    linalg.yield %q : f32
  }} -> tensor<4xf32>
  return %r : tensor<4xf32>
}}
"""

INT_MATMUL = MATMUL.replace("f32", "i32").replace("arith.mulf", "arith.muli").replace("arith.addf", "arith.addi") \
    .replace("0.0 : i32", "0 : i32")

EPILOGUE_REDUCTION = RESIDUAL.replace(
    '%o = linalg.generic {{indexing_maps = [#mI, #mI, #mI], iterator_types = ["parallel", "parallel"]}}',
    '%o = linalg.generic {{indexing_maps = [#mI, #mI, #mI], iterator_types = ["parallel", "reduction"]}}')


TWO_POSITIONS = RESIDUAL.replace("tensor<21x18xf32>", "tensor<18x18xf32>").replace("21x36", "18x36").replace(
    "ins(%s, %res : tensor<18x18xf32>, tensor<18x18xf32>)", "ins(%s, %r : tensor<18x18xf32>, tensor<18x18xf32>)").replace(
    "%o = linalg.generic {{indexing_maps = [#mI, #mI, #mI]", "%o = linalg.generic {{indexing_maps = [#mI, #mT, #mI]")


@pytest.mark.parametrize("text,why", [
    (NOT_A_PRODUCT, r"out \+ x \* y"),
    (INT_MATMUL.format(M=4, N=4, attrs=ATTRS, amap="d0, d2", ashape="4x4", bmap="d2, d1", bshape="4x4"), "i32"),
    (EPILOGUE_REDUCTION, "reduction"),
    (TWO_POSITIONS, "position"),
    (SUM_OF_SQUARES, "plain reduction"),
])
def test_unsupported_patterns_raise(ctx, text, why):
    _, f = kernel_of(text.format(attrs=ATTRS) if "{attrs}" in text else text, ctx)
    with pytest.raises(CodegenError, match=why):
        generate_contraction(f, "interpret")


def test_bf16_linear_gelu_epilogue_with_inlined_constants():
    """Regression: bf16 epilogue arithmetic upcasts each operand with `.to(tl.float32)`, which the
    template also applied to constants it inlines as Python literals (`1.0.to(...)`: the kernel
    failed at its first launch and the whole Linear+GELU ran eagerly)."""
    import uniorch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU()).bfloat16()
    x = torch.randn(8, 64).bfloat16()
    rep = uniorch.explain(model, x, target="interpret")
    assert not rep.fallbacks, rep
    assert any(k.kind == "contraction" for k in rep.kernels)
    cm = uniorch.compile(model, target="interpret")
    x = torch.randn(8, 64).bfloat16()
    out = cm(x)
    # bf16 ulps differ with the accumulation order; against the fp32 computation from the same
    # bf16 weights, both eager and the kernel are within two bf16 roundings
    ref = model.float()(x.float())
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)
