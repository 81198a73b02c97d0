"""Decompositions that keep PyTorch's NaN semantics where torch-mlir's lowering drops them.

torch-mlir lowers `aten.maximum` / `aten.minimum` on floats to `arith.cmpf ogt|olt` + `select`,
which returns the second operand when the first is NaN; PyTorch returns NaN if either operand is
NaN. Rewriting them before import as a select that tests for NaN explicitly keeps the answer right
and still fuses as one pointwise op.

The same lowering (`arith.cmpf ogt|olt` + `select` of the index) makes torch-mlir's `argmax`,
`argmin`, `max.dim` and `min.dim` skip NaNs: PyTorch returns the first NaN's index. They become
an exact rewrite here for floats (see `_arg_extreme`; integers keep torch-mlir's one-pass lowering),
which also covers the forms torch-mlir cannot lower at all, for every dtype: a 0-d input, and
`dim=None` (whose one-element reduction failed to run).

`clamp` (and clamp_min, clamp_max, hardtanh, relu6, hardsigmoid through them) lowered the same way
turned a NaN input into a bound on the cpu target (`clamp(nan, -1, 1)` gave -1; relu6 and
hardsigmoid gave 0 on every target), hiding a diverging activation; PyTorch keeps the NaN, and a
NaN bound makes the result NaN. Each bound becomes a select whose condition says so, in the
result dtype (an integer tensor clamped by float bounds is a float result).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _maximum(a, b):
    if not (a.dtype.is_floating_point or b.dtype.is_floating_point):
        return NotImplemented
    return torch.where((a > b) | torch.isnan(a), a, b)


def _minimum(a, b):
    if not (a.dtype.is_floating_point or b.dtype.is_floating_point):
        return NotImplemented
    return torch.where((a < b) | torch.isnan(a), a, b)


def _arg_extreme(x, dim, keepdim: bool, largest: bool):
    """argmax/argmin as PyTorch defines them: the first index of the row's max (min), or of its
    first NaN. The row's amax (amin; NaN when the row holds one) is compared back against the row,
    NaNs always match, and the smallest matching index wins (an integer min-reduction)."""
    if x.dtype == torch.bool or x.is_complex():
        return NotImplemented
    if not x.dtype.is_floating_point and dim is not None and x.dim() > 0:
        return NotImplemented  # torch-mlir's integer lowering is exact (no NaN), one reduction
    if dim is None:  # over all elements, as one flat row
        out_shape = [1] * x.dim() if keepdim else []
        x, d = x.reshape(-1), 0
    elif x.dim() == 0:
        return torch.zeros((), dtype=torch.int64, device=x.device)
    else:
        out_shape, d = None, dim % x.dim()
    n = x.shape[d]
    m = torch.amax(x, d, keepdim=True) if largest else torch.amin(x, d, keepdim=True)
    hit = x == m
    if x.dtype.is_floating_point:
        hit = hit | (x != x)
    iota = torch.arange(n, dtype=torch.int64, device=x.device).reshape([n] + [1] * (x.dim() - d - 1))
    idx = torch.amin(torch.where(hit, iota, n), d, keepdim=keepdim)
    return idx if out_shape is None else idx.reshape(out_shape)


def _extreme_dim(x, dim, keepdim: bool, largest: bool):
    """max.dim/min.dim: the index as `_arg_extreme`, the value the row's amax (amin). Where only
    the values are read (PointNet's `torch.max(x, 2)[0]`) the index search is dead code, and the
    max can come from partials in the producing matmul's epilogue (passes/tile_stats.py), as
    Inductor lowers it too. A value gathered at the index was exact to the sign of a zero max
    (PyTorch gives the first zero's), but read x a second time."""
    if x.dtype == torch.bool or x.is_complex() or (x.dim() > 0 and not x.dtype.is_floating_point):
        return NotImplemented
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    d = dim % x.dim()
    idx = _arg_extreme(x, d, True, largest)
    val = torch.amax(x, d, keepdim=True) if largest else torch.amin(x, d, keepdim=True)
    if not keepdim:
        val, idx = val.squeeze(d), idx.squeeze(d)
    return val, idx


def _clamp(x, lo=None, hi=None):
    if x.is_complex():
        return NotImplemented
    dtype = x.dtype
    for bound in (lo, hi):
        if bound is not None:
            dtype = torch.promote_types(dtype, torch.result_type(x, bound))
    if not dtype.is_floating_point:
        return NotImplemented  # integers: no NaN, torch-mlir's lowering is exact
    x = x.to(dtype)
    for bound, below in ((lo, True), (hi, False)):
        if bound is None:
            continue
        b = bound.to(dtype) if isinstance(bound, torch.Tensor) else \
            torch.scalar_tensor(bound, dtype=dtype, device=x.device)
        out_of = (x < b) if below else (x > b)
        x = torch.where(out_of | torch.isnan(b), b, x)  # a NaN x stays: both compares are false
    return x


TABLE = {
    aten.clamp.default: _clamp,
    aten.clamp.Tensor: _clamp,
    aten.clamp_min.default: lambda x, lo: _clamp(x, lo, None),
    aten.clamp_min.Tensor: lambda x, lo: _clamp(x, lo, None),
    aten.clamp_max.default: lambda x, hi: _clamp(x, None, hi),
    aten.clamp_max.Tensor: lambda x, hi: _clamp(x, None, hi),
    aten.hardtanh.default: lambda x, lo=-1, hi=1: _clamp(x, lo, hi),
    aten.maximum.default: _maximum,
    aten.minimum.default: _minimum,
    aten.argmax.default: lambda x, dim=None, keepdim=False: _arg_extreme(x, dim, keepdim, True),
    aten.argmin.default: lambda x, dim=None, keepdim=False: _arg_extreme(x, dim, keepdim, False),
    aten.max.dim: lambda x, dim, keepdim=False: _extreme_dim(x, dim, keepdim, True),
    aten.min.dim: lambda x, dim, keepdim=False: _extreme_dim(x, dim, keepdim, False),
}
