"""Variance and standard deviation (and everything built on them: LayerNorm, GroupNorm, BatchNorm
in training, `var`, `std`) in the input's own precision: a mean, then the mean of squared
deviations from it.

Why: torch-mlir's lowering of `aten.var.correction` upcasts to float64 ("for precision"), so an
fp32 LayerNorm wrote an f64 copy of its activation and reduced the row twice, once in f64, once in
f32. GPUs run f64 at a small fraction of f32's rate and some accelerators have none; ATen computes
these statistics in the input's type (fp32 opmath for 16-bit inputs, done by opmath.py around
these entries). The reductions read the same row and land in one kernel, so the row is read from
memory once. float64 inputs keep torch-mlir's lowering.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _dims(x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    return [d % max(1, x.dim()) for d in ([dim] if isinstance(dim, int) else dim)]


def _var_mean(x, dim=None, *, correction=None, keepdim=False):
    if x.dtype != torch.float32 or x.dim() == 0:
        return NotImplemented
    dims = _dims(x, dim)
    count = 1
    for d in dims:
        count *= x.shape[d]
    # The corrected two-pass algorithm (Chan, Golub and LeVeque): deviations from a first mean,
    # whose own sum corrects both the mean and the variance. A plain fp32 sum loses ~log2(N) ulps
    # of a mean far from zero (rows around 300 came out 4-9x further from float64 than eager's
    # Welford); the correction recovers them, at the cost of one more sum over the same row.
    mean0 = torch.sum(x, dims, keepdim=True) / count
    dev = x - mean0
    s1 = torch.sum(dev, dims, keepdim=True)
    mean = mean0 + s1 / count
    ss = torch.sum(dev * dev, dims, keepdim=True) - s1 * s1 / count
    # ATen divides by max(0, N - correction): N <= correction gives inf or NaN, as here
    var = ss / max(0, count - (1 if correction is None else correction))
    if not keepdim:
        var, mean = var.squeeze(dims), mean.squeeze(dims)
    return var, mean


def _var(x, dim=None, *, correction=None, keepdim=False):
    out = _var_mean(x, dim, correction=correction, keepdim=keepdim)
    return out if out is NotImplemented else out[0]


def _std(x, dim=None, *, correction=None, keepdim=False):
    out = _var_mean(x, dim, correction=correction, keepdim=keepdim)
    return out if out is NotImplemented else torch.sqrt(out[0])


def _std_mean(x, dim=None, *, correction=None, keepdim=False):
    out = _var_mean(x, dim, correction=correction, keepdim=keepdim)
    return out if out is NotImplemented else (torch.sqrt(out[0]), out[1])


def _weight_norm_backward(grad_w, v, g, norms, dim):
    """Weight norm's backward (w = g · v / ‖v‖, norms over every dim but `dim`), as PyTorch's own
    differentiable formula: otherwise an eager call between kernels, whose CPU kernel also takes
    its gradient as contiguous whatever its strides."""
    keep = [d for d in range(v.dim()) if d != dim % v.dim()] if dim != -1 else list(range(v.dim()))
    sums = (grad_w * v).sum(keep, keepdim=True)
    grad_v = (g / norms) * (grad_w - v * (sums / (norms * norms)))
    return grad_v.to(v.dtype), (sums / norms).to(g.dtype)


TABLE = {
    aten._weight_norm_interface_backward.default: _weight_norm_backward,
    aten.var_mean.correction: _var_mean,
    aten.var.correction: _var,
    aten.std.correction: _std,
    aten.std_mean.correction: _std_mean,
}
