"""PyTorch's float32 matmul precision decides uniorch's float32 dots, as it decides eager's and
Inductor's: "highest" (PyTorch's default) keeps matmuls exact on FMA units; "high" lets them use
TF32 tensor cores on NVIDIA GPUs from sm_80. A float32 attention there is 3xTF32 (what PyTorch's
memory-efficient SDPA kernel computes), exact when that kernel is disabled. Checked in the
generated Triton and in the PTX Triton compiles from it (TF32 `mma`/`wgmma` instructions, or none)."""
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from uniorch.aot import compile_aot
from uniorch.api import explain_static


class Block(nn.Module):
    """A linear layer, then attention over its output: both dot kinds (contraction, attention)."""

    def __init__(self, d=64):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        h = self.fc(x)
        return F.scaled_dot_product_attention(h, h, h, is_causal=True)


@pytest.fixture
def precision():
    before = torch.get_float32_matmul_precision()
    yield torch.set_float32_matmul_precision
    torch.set_float32_matmul_precision(before)


def _sources(target, dtype=torch.float32):
    x = torch.randn(1, 2, 64, 64, dtype=dtype)
    report = explain_static(Block().to(dtype).eval(), (x,), target=target)
    return {k.kind: k.source for k in report.kernels}


def _dots(source):
    return re.findall(r"tl\.dot\([^\n]*", source)


@pytest.mark.parametrize("mode, math_only, expected", [
    ("highest", False, {"contraction": "ieee", "attention": "tf32x3"}),
    ("highest", True, {"contraction": "ieee", "attention": "ieee"}),
    ("high", False, {"contraction": "tf32", "attention": "tf32"}),
    ("high", True, {"contraction": "tf32", "attention": "tf32"}),  # eager's math SDPA takes TF32 too
    ("medium", False, {"contraction": "tf32", "attention": "tf32"}),
])
def test_fp32_dots_follow_the_matmul_precision(precision, mode, math_only, expected):
    precision(mode)
    backends = [SDPBackend.MATH] if math_only else [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    with sdpa_kernel(backends):
        sources = _sources("cuda:sm_90")
    assert {"contraction", "attention"} <= set(sources)
    for kind in ("contraction", "attention"):
        dots = _dots(sources[kind])
        assert dots and all(f'input_precision="{expected[kind]}"' in d for d in dots), (kind, dots)


def test_attention_tiles_follow_the_units_its_dots_run_on(precision):
    """At head dim 128: FMA tiles for exact dots, tensor-core ones for TF32 and 3xTF32 (fewer keys
    per tile: 3xTF32 holds q's two halves). The precision is on the kernel before its schedule is
    chosen; it was stamped after, and a TF32 attention took FMA's 32x32 tiles."""
    x = torch.randn(1, 2, 1024, 128)
    tiles = {}
    for mode, backends in (("highest", [SDPBackend.MATH]), ("high", [SDPBackend.MATH]),
                           ("highest", [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])):
        precision(mode)
        with sdpa_kernel(backends):
            (k,) = [k for k in explain_static(Block(128).eval(), (x,), target="cuda:sm_90").kernels
                    if k.kind == "attention"]
        tiles[mode, len(backends)] = tuple(int(k.schedule[n].split(":")[0])
                                           for n in ("block_m", "block_n", "num_warps"))
    assert tiles["highest", 1] == (32, 32, 8)
    assert tiles["high", 1] == (128, 64, 8)
    assert tiles["highest", 2] == (128, 32, 8)


@pytest.mark.parametrize("target", ["cuda:sm_75", "rocm:gfx942", "interpret"])
def test_tf32_only_where_nvidia_has_it(precision, target):
    precision("high")
    for source in _sources(target).values():
        assert all('input_precision="tf32"' not in d for d in _dots(source))


def test_16_bit_dots_are_unchanged(precision):
    precision("high")
    for source in _sources("cuda:sm_90", torch.bfloat16).values():
        assert all("input_precision" not in d for d in _dots(source))


def _mma_kinds(ptx: str) -> set:
    return set(re.findall(r"\b(w?mma)\S*\.tf32", ptx))


def test_the_ptx_uses_tf32_tensor_cores_only_when_allowed(precision):
    x = torch.randn(1, 2, 64, 64)
    kinds = {}
    # the capture runs on this CPU, which has no memory-efficient kernel: MATH beside it
    for mode, backends in (("highest", [SDPBackend.MATH]),
                           ("highest", [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]),
                           ("high", [SDPBackend.MATH])):
        precision(mode)
        with sdpa_kernel(backends):
            art = compile_aot(Block().eval(), (x,), target="cuda:sm_90")
        kinds[mode, backends[0]] = {k.kind: _mma_kinds(k.asm["ptx"]) for k in art.kernels
                                    if k.kind in ("contraction", "attention")}
    assert kinds["highest", SDPBackend.MATH] == {"contraction": set(), "attention": set()}, kinds
    eff = kinds["highest", SDPBackend.EFFICIENT_ATTENTION]
    assert not eff["contraction"] and eff["attention"], kinds
    assert all(kinds["high", SDPBackend.MATH][k] for k in ("contraction", "attention")), kinds


@pytest.mark.parametrize("mode, math_only, expected", [
    ("highest", False, "tf32x3"), ("highest", True, "ieee"), ("high", False, "tf32")])
def test_attention_backward_chains_take_the_attentions_precision(precision, mode, math_only, expected):
    """The chains computing dq, dk and dv recompute the probabilities from the saved log-sum-exp:
    the backward of a fused attention, whose float32 dots PyTorch's memory-efficient kernel runs
    as 3xTF32. They ran exact, on FMA units (the B factor copied to N-major before each: 151 MB a
    step for GPT-2 small's block at 8 x 1024 tokens). A chain of a transformer's MLP (no
    probabilities) stays a matmul's precision."""
    from test_training import SplitAttention

    from uniorch.tools.bench.spills import training_halves

    precision(mode)
    backends = [SDPBackend.MATH] if math_only else [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    torch.manual_seed(0)
    # traced with the CPU's fused SDPA (its backward reads the log-sum-exp), compiled for the GPU
    # with its memory-efficient kernel on or off
    (bwd,) = [(gm, ex) for half, gm, ex in training_halves(SplitAttention(128, 2), (torch.randn(1, 1024, 128),))
              if half == "bwd"]
    with sdpa_kernel(backends):
        kernels = explain_static(*bwd, target="cuda:sm_90").kernels
    chains = [k for k in kernels if k.kind == "chain"]
    assert chains, [k.kind for k in kernels]
    for k in chains:
        dots = _dots(k.source)
        assert dots and all(f'input_precision="{expected}"' in d for d in dots), (k.name, dots)
    mlp = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64)).eval()
    (chain,) = [k for k in explain_static(mlp, (torch.randn(256, 64),), target="cuda:sm_90").kernels
                if k.kind == "chain"]
    want = "ieee" if mode == "highest" else "tf32"
    assert all(f'input_precision="{want}"' in d for d in _dots(chain.source))
