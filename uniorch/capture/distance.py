"""`torch.cdist` as reductions uniorch fuses (torch-mlir has no lowering for `_cdist_forward`).

Each p follows ATen's own algorithm, so results match eager up to summation order: the p = 2
matrix-product form (`_euclidean_dist`) where ATen uses it, the broadcast difference otherwise.
The matmul form cancels (||a||² + ||b||² - 2ab), so a zero distance comes out as the square root
of a rounding error (~5e-4 for unit-scale fp32 rows) in eager and here alike, not bit-equal.
The broadcast form never materializes [.., P, R, M]: fusion makes it one reduction kernel.
"""
from __future__ import annotations

import math

import torch

aten = torch.ops.aten


def _uses_mm(p: float, x1, x2, compute_mode) -> bool:
    """ATen's choice (aten/src/ATen/native/Distance.cpp): 0/None = mm when P or R > 25."""
    if p != 2:
        return False
    if compute_mode == 1:
        return True
    if compute_mode == 2:
        return False
    return x1.shape[-2] > 25 or x2.shape[-2] > 25


def _euclidean_dist(x1, x2):
    """ATen's `_euclidean_dist`: ||a||² - 2ab + ||b||² as one matmul of padded operands."""
    x1_norm = x1.pow(2).sum(-1, keepdim=True)
    x2_norm = x2.pow(2).sum(-1, keepdim=True)
    x1_pad = torch.ones_like(x1_norm)
    x2_pad = torch.ones_like(x2_norm)
    x1_ = torch.cat([x1.mul(-2), x1_norm, x1_pad], -1)
    x2_ = torch.cat([x2, x2_pad, x2_norm], -1)
    return x1_.matmul(x2_.mT).clamp_min(0).sqrt()


def cdist_forward(x1, x2, p: float, compute_mode=None):
    if not (x1.dtype.is_floating_point and x2.dtype == x1.dtype) or x1.shape[-1] != x2.shape[-1]:
        return NotImplemented
    if x1.shape[-2] == 0 or x2.shape[-2] == 0 or x1.shape[-1] == 0:
        return NotImplemented  # ATen returns zeros / empties; leave those shapes to it
    if _uses_mm(p, x1, x2, compute_mode):
        return _euclidean_dist(x1, x2)
    diff = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs()  # [.., P, R, M]
    if p == 0:
        # ATen's CPU kernel sums min(ceil(|d|), 1): a NaN coordinate makes the distance NaN (its CUDA
        # kernel counts `d != 0`, so NaN as a difference; the CPU rule is the one kept)
        return torch.where(torch.isnan(diff), diff, (diff != 0).to(x1.dtype)).sum(-1)
    if p == 1:
        return diff.sum(-1)
    if p == 2:
        return diff.pow(2).sum(-1).sqrt()
    if math.isinf(p):
        # ATen folds `if (diff > agg) agg = diff` from 0 on CPU and CUDA alike: a NaN never wins
        return torch.where(torch.isnan(diff), 0.0, diff).amax(-1)
    return diff.pow(p).sum(-1).pow(1.0 / p)


TABLE = {aten._cdist_forward.default: cdist_forward}
