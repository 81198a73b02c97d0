"""Flash kernels stop their key loop at a causal mask's diagonal (codegen/causal_bound.py): the
bound is proved from the score lines the kernel executes. Checked: the proof on hand-written
score lines (what proves, what must not), the bound in the generated GPU source, and the GPU
kernel's numbers against eager, run on Triton's interpreter (the `interpret` target itself keeps
every key: Triton 3.6's interpreter needs integer loop bounds)."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import uniorch
from uniorch.api import explain_static
from uniorch.codegen import generate
from uniorch.codegen.causal_bound import causal_offset
from uniorch.runtime import loader
from uniorch.backends.triton_launch import TritonLauncher

SDPA_CAUSAL = ["s_c0 = qk", "s_e0 = j0", "s_e1 = s_e0.to(tl.int64)", "s_e2 = m0", "s_e3 = s_e2.to(tl.int64)",
               "s_e4 = s_e1 - s_e3  # loc", "s_e5 = s_e4 <= 0", 's_e6 = tl.where(s_e5, 0.0, float("-inf"))',
               "s_e7 = s_c0 + s_e6", "s = s_e7"]


@pytest.mark.parametrize("lines, expected", [
    (SDPA_CAUSAL, 0),
    ([ln.replace("<= 0", "<= 5") for ln in SDPA_CAUSAL], 5),                 # tril(k): a band further out
    ([ln.replace("s_e4 <= 0", "s_e3 >= s_e1") for ln in SDPA_CAUSAL], 0),    # written as i >= j
    ([ln.replace("s_e4 <= 0", "s_e4 < 3") for ln in SDPA_CAUSAL], 2),
    (["s_c0 = qk * 0.125", "s_e5 = j0 - m0 <= 0", 's = tl.where(s_e5, s_c0, float("-inf"))'], 0),
    # nothing to prove: the upper triangle, a mask from memory, a function of the score, -inf kept
    ([ln.replace("s_e4 <= 0", "s_e4 >= 0") for ln in SDPA_CAUSAL], None),
    (["s_c0 = qk", "s_e0 = tl.load(in3_ptr + m0 * in3_s0 + j0 * in3_s1)", "s = s_c0 + s_e0"], None),
    (["s_c0 = qk", "s_e5 = j0 - m0 <= 0", 's_e6 = tl.where(s_e5, 0.0, float("-inf"))', "s_e7 = s_c0 + s_e6",
      "s = tl.tanh(s_e7)"], None),
    (["s_c0 = qk", "s_e5 = j0 - m0 <= 0", 's = tl.where(s_e5, float("-inf"), s_c0)'], None),
    (["s_c0 = qk * -1.0", "s_e5 = j0 - m0 <= 0", 's_e6 = tl.where(s_e5, 0.0, float("-inf"))',
      "s = s_c0 + s_e6"], None),   # a negative scale is not modelled: nothing claimed
    (["s_c0 = qk", "j0 = m0", "s_e5 = j0 - m0 <= 0", 's = tl.where(s_e5, s_c0, float("-inf"))'], None),
    # masked_fill(~tril, -inf), the written-out form: -inf where the key is past the query
    (["s_c0 = qk * 0.125", "s_e5 = j0 - m0 > 0", 's = tl.where(s_e5, float("-inf"), s_c0)'], 0),
    (["s_c0 = qk", "s_e5 = j0 - m0 > 2", 's = tl.where(s_e5, float("-inf"), s_c0)'], 2),
])
def test_the_proof(lines, expected):
    assert causal_offset(lines, "m0", "j0", "qk") == expected


@pytest.mark.parametrize("lines, c, expected", [
    (SDPA_CAUSAL, 0, {"s_e5": True}),
    ([ln.replace("<= 0", "<= 5") for ln in SDPA_CAUSAL], 0, {"s_e5": True}),  # j - i <= 5 where j - i <= 0
    ([ln.replace("<= 0", "<= -1") for ln in SDPA_CAUSAL], 0, {}),             # not decided at j - i = 0
    (["s_c0 = qk", "s_e5 = j0 - m0 > 0", 's = tl.where(s_e5, float("-inf"), s_c0)'], 0, {"s_e5": False}),
    (["s_c0 = qk", "s_e5 = j0 - m0 > -1", 's = tl.where(s_e5, float("-inf"), s_c0)'], 0, {}),
    (["s_c0 = qk", "s_e5 = j0 + m0 <= 0", 's = tl.where(s_e5, s_c0, float("-inf"))'], 0, {}),  # no band
])
def test_predicates_decided_below_the_band(lines, c, expected):
    """What the loop over key tiles below the diagonal may take as constants (attention.py)."""
    from uniorch.codegen.causal_bound import band_predicates

    assert band_predicates(lines, "m0", "j0", "qk", c) == expected


def _causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _plain(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def _kernel_source(fn, args, target="cuda:sm_90"):
    (k,) = [k for k in explain_static(fn, args, target=target).kernels if k.kind == "attention"]
    return k.source


def test_the_gpu_source_stops_at_the_diagonal_and_only_for_causal_masks():
    q = k = v = torch.randn(1, 2, 256, 64)
    assert "tl.minimum(256, pid_m * BLOCK_M + BLOCK_M + 0)" in _kernel_source(_causal, (q, k, v))
    assert "for start_n in range(0, 256, BLOCK_N)" in _kernel_source(_plain, (q, k, v))
    assert "for start_n in range(0, 256, BLOCK_N)" in _kernel_source(_causal, (q, k, v), target="interpret")


@pytest.mark.parametrize("lq, lk", [(130, 130), (48, 130)])
def test_the_gpu_kernel_computes_what_eager_does(lq, lk):
    import triton

    if tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7):
        pytest.skip("Triton's interpreter before 3.7 needs integer loop bounds")
    torch.manual_seed(lq)
    q, k, v = torch.randn(1, 2, lq, 64), torch.randn(1, 2, lk, 64), torch.randn(1, 2, lk, 64)
    cm = uniorch.compile(_causal, target="interpret")
    cm(q, k, v)
    regions = [r for e in cm._cache.values() for r in e.program.regions]
    (kernel,) = [x for r in regions for x in r.plan.kernels.values() if x.source.name.endswith("attention")]
    gpu = generate(kernel.func_op, "cuda:sm_90")  # the GPU kernel, bound and all, on the interpreter
    assert "pid_m * BLOCK_M + BLOCK_M" in gpu.source
    kernel.source, kernel.fn = gpu, TritonLauncher(gpu, loader.load(gpu, interpret=True))
    q2, k2, v2 = (torch.randn_like(t) for t in (q, k, v))
    ref = _causal(*(t.double() for t in (q2, k2, v2)))
    torch.testing.assert_close(cm(q2, k2, v2).double(), ref, rtol=0, atol=2e-5)


@pytest.mark.parametrize("target, binary", [("cuda:sm_90", "cubin"), ("rocm:gfx942", "hsaco")])
def test_the_bounded_loop_compiles_to_gpu_binaries(target, binary):
    from uniorch.aot import compile_aot

    q = k = v = torch.randn(1, 2, 256, 64, dtype=torch.bfloat16)
    art = compile_aot(_causal, (q, k, v), target=target)
    (kernel,) = [x for x in art.kernels if x.kind == "attention"]
    assert "pid_m * BLOCK_M + BLOCK_M" in kernel.asm["triton"] and kernel.asm[binary] and not art.fallbacks


class _GPT2Attention(torch.nn.Module):
    """GPT-2's attention as the benchmark runs it: q, k and v split off one projection, causal SDPA."""

    def forward(self, qkv):
        b, t, c3 = qkv.shape
        q, k, v = (z.view(b, t, 12, 64).transpose(1, 2) for z in qkv.split(c3 // 3, dim=2))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c3 // 3)


def _scaled_scores(q, k, v):  # the benchmark's attention row: the scale on the scores
    return torch.softmax(q @ k.transpose(-1, -2) * 0.125, -1) @ v


def _spilled(kernel) -> int:
    """Bytes a thread spills in the kernel's cubin, by ptxas -v (the PTX JIT launches would run)."""
    import re

    from uniorch.backends.cuda.ptxas import run_ptxas

    ptx = (kernel.specialized or kernel).asm["ptx"]
    run = run_ptxas(ptx, "sm_90", "-v")
    assert run.returncode == 0, run.stderr
    return sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", run.stdout + run.stderr))


def test_gpt2s_fp32_attention_spills_no_more_than_plain_attention():
    """H200 run 6: gpt2_block's causal fp32 attention took 1.66 ms where the benchmark's attention
    row (its scale on the scores), with more work, took 0.89. gpt2's sm_90 kernel spilled (Triton
    3.6's ptxas: 1.8 KB a thread at 255 registers, the row's kernel none; Triton 3.9's: 17 KB
    against 1.8) while it multiplied each k tile by SDPA's sqrt(scale) in the key loop. With the
    scales on the scores it spills no more than the row's kernel, under either Triton's ptxas.
    Exact float32 (FMA) attention, as with PyTorch's memory-efficient kernel disabled: by default
    these dots are 3xTF32 on sm_90 (tests/test_attention_tf32x3.py)."""
    from uniorch import compile_aot

    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        gpt2 = compile_aot(_GPT2Attention(), (torch.randn(1, 1024, 3 * 768),), target="cuda:sm_90")
        plain = compile_aot(_scaled_scores, tuple(torch.randn(1, 12, 1024, 64) for _ in range(3)), target="cuda:sm_90")
    (a,) = [k for k in gpt2.kernels if k.kind == "attention"]
    (b,) = [k for k in plain.kernels if k.kind == "attention"]
    assert _spilled(a) <= _spilled(b), (_spilled(a), _spilled(b))


def _masked(q, k, v, m):  # BERT's attention: the padding mask added to the scaled scores
    return torch.softmax(q @ k.transpose(-1, -2) / 8.0 + m, -1) @ v


def test_bert_masked_fp32_attention_takes_tiles_that_do_not_spill():
    """BERT's additive padding mask beside exact fp32 (FMA) scores: at 128x64 tiles and 8 warps
    Triton 3.6's ptxas spilled 972 bytes a thread on sm_90 (255 registers, against 166 without the
    mask; docs/perf/spills_sm90.md). A score epilogue that loads a tensor now takes 32 keys per tile
    at 4 warps: no spill with that ptxas, fewer than the plain kernel's with 3.9's. (Exact float32,
    as with PyTorch's memory-efficient kernel disabled.)"""
    from uniorch import compile_aot

    args = (*(torch.randn(2, 12, 512, 64) for _ in range(3)), torch.zeros(2, 1, 1, 512))
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
        masked = compile_aot(_masked, args, target="cuda:sm_90")
        plain = compile_aot(_scaled_scores, args[:3], target="cuda:sm_90")
    (a,) = [k for k in masked.kernels if k.kind == "attention"]
    (b,) = [k for k in plain.kernels if k.kind == "attention"]
    assert (a.source.constexprs["BLOCK_M"], a.source.constexprs["BLOCK_N"], a.source.num_warps) == (128, 32, 4)
    assert (b.source.constexprs["BLOCK_N"], b.source.num_warps) == (64, 8)  # no mask: as before
    assert _spilled(a) <= _spilled(b), (_spilled(a), _spilled(b))


@pytest.mark.parametrize("fp32_dot, tiles", [(None, (128, 64)), ("ieee", (128, 32))])
def test_the_masked_gpu_kernel_computes_what_eager_does(fp32_dot, tiles):
    """At the sm_90 tiles of 3xTF32 dots (the default) and of exact ones (FMA): the interpreter
    computes both dots exactly, so this checks the tiling, masks and partial tiles."""
    import triton
    from torch_mlir import ir

    from uniorch.codegen.patterns import FP32_DOT

    if tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7):
        pytest.skip("Triton's interpreter before 3.7 needs integer loop bounds")
    torch.manual_seed(0)
    mask = torch.zeros(1, 1, 1, 130)
    mask[..., 100:] = -1e4
    args = (*(torch.randn(1, 2, 130, 64) for _ in range(3)), mask)
    cm = uniorch.compile(_masked, target="interpret")
    cm(*args)
    regions = [r for e in cm._cache.values() for r in e.program.regions]
    (kernel,) = [x for r in regions for x in r.plan.kernels.values() if x.source.name.endswith("attention")]
    from uniorch.passes.schedule import _attach_schedule

    if fp32_dot:
        kernel.func_op.attributes[FP32_DOT] = ir.StringAttr.get(fp32_dot, kernel.func_op.context)
    _attach_schedule(kernel.func_op, "cuda:sm_90")  # the GPU's tiles, not the interpreter's
    gpu = generate(kernel.func_op, "cuda:sm_90")  # the last key tile is partial
    assert (gpu.constexprs["BLOCK_M"], gpu.constexprs["BLOCK_N"]) == tiles
    assert f'input_precision="{fp32_dot or "tf32x3"}"' in gpu.source
    kernel.source, kernel.fn = gpu, TritonLauncher(gpu, loader.load(gpu, interpret=True))
    fresh = (*(torch.randn(1, 2, 130, 64) for _ in range(3)), mask)
    ref = _masked(*(t.double() for t in fresh))
    torch.testing.assert_close(cm(*fresh).double(), ref, rtol=0, atol=2e-5)


def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rotary(q, k, v, cos, sin):  # Llama's attention: q and k rotated, then causal SDPA
    q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _rotary_args(t, d=128, dtype=torch.bfloat16):
    freqs = torch.outer(torch.arange(t, dtype=torch.float32), 1.0 / (1e4 ** (torch.arange(0, d, 2) / d)))
    emb = torch.cat((freqs, freqs), -1)
    return (*(torch.randn(1, 2, t, d, dtype=dtype) for _ in range(3)), emb.cos().to(dtype), emb.sin().to(dtype))


def test_bf16_attention_at_head_dim_128_takes_tensor_core_tiles():
    """SDPA's math widens 16-bit q, k and v to float32 and the kernel narrows them back for the
    tensor cores, but the schedule read the widened types: H200 run 6's llama_block bf16 attention
    (head dim 128) ran at FMA's 32x32 tiles, 0.36 ms against cuDNN's 0.05. It now takes 128 queries
    by 64 keys at 8 warps, with bf16 dots and no spill (the float32 kernel keeps its small tiles)."""
    from uniorch import compile_aot

    with torch.no_grad():
        bf16 = compile_aot(_rotary, _rotary_args(1024), target="cuda:sm_90")
        with sdpa_kernel(SDPBackend.MATH):  # exact float32: FMA dots
            fp32 = compile_aot(_rotary, _rotary_args(1024, dtype=torch.float32), target="cuda:sm_90")
    (a,) = [k for k in bf16.kernels if k.kind == "attention"]
    (b,) = [k for k in fp32.kernels if k.kind == "attention"]
    assert (a.source.constexprs["BLOCK_M"], a.source.constexprs["BLOCK_N"], a.source.num_warps) == (128, 64, 8)
    assert "tl.dot(p.to(tl.bfloat16)" in a.source.source
    import re

    qa, kb = re.search(r"qk = tl\.dot\((\w+), (\w+), qk\)", a.source.source).groups()
    for name in (qa, kb):  # q·kᵀ's operands are rounded to bf16 for the tensor cores
        assert re.search(rf"{name} = .*\.to\(tl\.bfloat16\)$", a.source.source, re.M), name
    assert "tl.dot(p.to(tl.float32)" in b.source.source or "tl.dot(p," in b.source.source
    assert (b.source.constexprs["BLOCK_M"], b.source.constexprs["BLOCK_N"]) == (32, 32)
    assert _spilled(a) == 0


def test_the_rotary_16_bit_gpu_kernel_computes_what_eager_does():
    """The sm_90 kernel at those tiles, on Triton's interpreter, against float64: in float16, since
    the interpreter's tl.dot reads bf16 operands wrongly (why the interpret target widens bf16)."""
    import triton

    if tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7):
        pytest.skip("Triton's interpreter before 3.7 needs integer loop bounds")
    torch.manual_seed(0)
    cm = uniorch.compile(_rotary, target="interpret")
    cm(*_rotary_args(130, dtype=torch.float16))
    regions = [r for e in cm._cache.values() for r in e.program.regions]
    (kernel,) = [x for r in regions for x in r.plan.kernels.values() if x.source.name.endswith("attention")]
    from uniorch.passes.schedule import _attach_schedule

    _attach_schedule(kernel.func_op, "cuda:sm_90")  # the GPU's tiles, not the interpreter's
    gpu = generate(kernel.func_op, "cuda:sm_90")  # 128x64: a partial query tile and key tile
    assert (gpu.constexprs["BLOCK_M"], gpu.constexprs["BLOCK_N"]) == (128, 64)
    assert "tl.dot(p.to(tl.float16)" in gpu.source
    kernel.source, kernel.fn = gpu, TritonLauncher(gpu, loader.load(gpu, interpret=True))
    fresh = _rotary_args(130, dtype=torch.float16)
    ref = _rotary(*(t.double() for t in fresh))
    eager = (_rotary(*fresh).double() - ref).abs().max().item()
    got = (cm(*fresh).double() - ref).abs().max().item()
    assert got <= 2 * eager + 1e-4, (got, eager)


def test_fp32_attention_runs_3xtf32_on_tensor_cores_without_spilling():
    """A float32 attention on sm_90 is 3xTF32 by default, as PyTorch's memory-efficient SDPA kernel
    (H200 run 6: gpt2_block's FMA attention 1.66 ms, that kernel 0.49). Llama's (head dim 128, k
    rotated in its load) spilled 844 bytes a thread at 128x64 tiles (Triton 3.6's ptxas), none at
    128x32; GPT-2's (head dim 64) keeps 128x64. Both dots on tensor cores: tf32 wgmma in the PTX.
    Spills are checked with the GPU machine's Triton (3.6)."""
    import re

    import triton

    from uniorch import compile_aot

    with torch.no_grad():
        llama = compile_aot(_rotary, _rotary_args(1024, dtype=torch.float32), target="cuda:sm_90")
        gpt2 = compile_aot(_GPT2Attention(), (torch.randn(1, 1024, 3 * 768),), target="cuda:sm_90")
    (a,) = [k for k in llama.kernels if k.kind == "attention"]
    (b,) = [k for k in gpt2.kernels if k.kind == "attention"]
    assert (a.source.constexprs["BLOCK_M"], a.source.constexprs["BLOCK_N"], a.source.num_warps) == (128, 32, 8)
    assert (b.source.constexprs["BLOCK_M"], b.source.constexprs["BLOCK_N"], b.source.num_warps) == (128, 64, 8)
    for k in (a, b):
        dots = re.findall(r"tl\.dot\([^\n]*", k.source.source)
        assert len(dots) == 2 and all('input_precision="tf32x3"' in d for d in dots), dots
        assert re.search(r"wgmma\.mma_async\S*\.tf32\.tf32", (k.specialized or k).asm["ptx"])
        assert not k.source.relayout  # tensor cores read k as it is (FMA dots want it keys-innermost)
        if tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7):
            assert _spilled(k) == 0


# an attention backward's dQ chain: P = exp(S - lse) with S masked to -inf past the diagonal,
# times (dP - rowsum(dO O)), the loads taken as finite
DQ_LINES = ["s_e4 = j0 - m0", "s_e5 = s_e4 <= 0", "s_e6 = qk * 0.25", 's_e7 = tl.where(s_e5, s_e6, float("-inf"))',
            "s_l = tl.load(tl.reshape(in4_ptr + m0 * in4_s2, (BLOCK_M,)))[:, None]", "s_e8 = s_e7 - s_l",
            "s_e9 = tl.exp(s_e8)", "s_e10 = accu - tl.load(in5_ptr + m0)", "s = s_e9 * s_e10"]


@pytest.mark.parametrize("lines, expected", [
    (DQ_LINES, ("stop", 0)),
    # dK, dV: rows are keys (m0), the hidden dim queries (j0): 0 before the diagonal
    ([ln.replace("j0 - m0", "m0 - j0") for ln in DQ_LINES], ("start", 0)),
    ([ln.replace("<= 0", "<= 3") for ln in DQ_LINES], ("stop", 3)),
    # a gradient masked to 0 by where(mask, 0, x)
    (["s_e5 = j0 - m0 > 0", "s = tl.where(s_e5, 0.0, qk * accu)"], ("stop", 0)),
    (["s_e5 = j0 - m0 <= 0", "s_x = tl.where(s_e5, qk, 0.0)", "s = s_x.to(tl.bfloat16) * 0.5"], ("stop", 0)),
    # nothing to prove: a mask from memory, exp of an unmasked score, a fill that is not 0, 0 + 1
    (["s_m = tl.load(in3_ptr + m0 * in3_s0 + j0)", "s = tl.where(s_m, qk, 0.0)"], None),
    (["s = tl.exp(qk - tl.load(in4_ptr + m0))"], None),
    (["s_e5 = j0 - m0 <= 0", "s = tl.where(s_e5, qk, 1.0)"], None),
    (["s_e5 = j0 - m0 <= 0", "s_x = tl.where(s_e5, qk, 0.0)", "s = s_x + 1.0"], None),
])
def test_the_zero_band_proof(lines, expected):
    from uniorch.codegen.causal_bound import zero_band

    assert zero_band(lines, "m0", "j0", ("qk", "accu")) == expected
