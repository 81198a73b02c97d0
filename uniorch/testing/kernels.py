"""The standard kernel set every backend is checked on: one small function per kernel shape that
uniorch's fusion produces (docs/kernels.md §2), in the dtypes backends most often get wrong.

Each case is a plain function of tensors plus a factory of fresh random inputs; shapes are small
and odd-sized (masked edges) so the whole set compiles in seconds and runs in the interpreter.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable
    make_inputs: Callable[[], tuple]
    what: str  # the kernel shape it exercises


def _pointwise_broadcast(x, y, z):
    return torch.sigmoid(torch.relu(x * y + z)) * 0.5 - z


def _softmax(x):
    return torch.softmax(x, dim=-1)


def _layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def _matmul_bias_gelu(a, w, b):
    return F.gelu(a @ w + b)


def _embedding(ids, table):
    return F.embedding(ids, table) * 2.0


def _transpose_fed(x, y):
    return torch.tanh(x.t() + y) * y


def _int_arith(a, b):
    return torch.where(a > b, a - b, b * 3 + 1)


def _bf16_silu_mul(x, y):
    return F.silu(x) * y


def _fp16_rowsum(x, y):
    return (x + y).sum(dim=-1) + x.amax(dim=-1)


CASES: tuple[Case, ...] = (
    Case("pointwise_broadcast", _pointwise_broadcast,
         lambda: (torch.randn(17, 40), torch.randn(40), torch.randn(17, 1)), "pointwise chain with broadcasts"),
    Case("softmax", _softmax, lambda: (torch.randn(13, 100),), "row reduction (max, exp, sum)"),
    Case("layernorm", _layernorm, lambda: (torch.randn(9, 96), torch.randn(96), torch.randn(96)),
         "two row reductions and an affine epilogue"),
    Case("matmul_bias_gelu", _matmul_bias_gelu,
         lambda: (torch.randn(24, 40), torch.randn(40, 36), torch.randn(36)), "contraction with a pointwise epilogue"),
    Case("embedding", _embedding, lambda: (torch.randint(0, 50, (4, 7)), torch.randn(50, 24)),
         "gather by int64 indices"),
    Case("transpose_fed", _transpose_fed, lambda: (torch.randn(20, 12), torch.randn(12, 20)),
         "transposed operand folded into indexing"),
    Case("int32_select", _int_arith,
         lambda: (torch.randint(-100, 100, (33,), dtype=torch.int32), torch.randint(-100, 100, (33,), dtype=torch.int32)),
         "int32 arithmetic and select"),
    Case("bf16_silu_mul", _bf16_silu_mul,
         lambda: (torch.randn(8, 64, dtype=torch.bfloat16), torch.randn(8, 64, dtype=torch.bfloat16)),
         "bf16 pointwise"),
    Case("fp16_rowsum", _fp16_rowsum,
         lambda: (torch.randn(6, 50, dtype=torch.float16), torch.randn(6, 50, dtype=torch.float16)),
         "fp16 reductions"),
)

# Relative error allowed per output dtype (docs/design.md: fp32 ≤ 1e-4, bf16 ≤ 1e-2); integers exact.
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-9, torch.bfloat16: 1e-2, torch.float16: 1e-2}


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    """‖got − want‖ / ‖want‖ in fp64 (as tests/test_aot.py measures); inf when shapes or dtypes
    differ or `got` has a NaN that `want` has not (NaN is never within tolerance)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return float("inf")
    g, w = got.detach().cpu().double(), want.detach().cpu().double()
    if bool((torch.isnan(g) & ~torch.isnan(w)).any()):
        return float("inf")
    g, w = torch.nan_to_num(g), torch.nan_to_num(w)
    return float((g - w).norm() / w.norm().clamp_min(1e-12)) if w.numel() else 0.0


__all__ = ["CASES", "Case", "TOLERANCE", "rel_err"]
