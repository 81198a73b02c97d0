"""PyTorch's float32 matmul precision decides uniorch's float32 dots, as it decides eager's and
Inductor's: "highest" (PyTorch's default) keeps them exact on FMA units; "high" lets them use
TF32 tensor cores on NVIDIA GPUs from sm_80. Checked in the generated Triton and in the PTX Triton
compiles from it (TF32 `mma`/`wgmma` instructions, or none)."""
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

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


@pytest.mark.parametrize("mode, expected", [("highest", "ieee"), ("high", "tf32"), ("medium", "tf32")])
def test_fp32_dots_follow_the_matmul_precision(precision, mode, expected):
    precision(mode)
    sources = _sources("cuda:sm_90")
    assert {"contraction", "attention"} <= set(sources)
    for kind in ("contraction", "attention"):
        dots = _dots(sources[kind])
        assert dots and all(f'input_precision="{expected}"' in d for d in dots), (kind, dots)


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
    for mode in ("highest", "high"):
        precision(mode)
        art = compile_aot(Block().eval(), (x,), target="cuda:sm_90")
        kinds[mode] = {k.kind: _mma_kinds(k.asm["ptx"]) for k in art.kernels if k.kind in ("contraction", "attention")}
    assert kinds["highest"] == {"contraction": set(), "attention": set()}
    assert all(kinds["high"][k] for k in ("contraction", "attention")), kinds["high"]
