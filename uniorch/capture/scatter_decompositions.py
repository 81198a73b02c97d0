"""Scatter-family ops torch-mlir cannot lower ("lowering to torch backend contract failed"), as
exact rewrites into ops it lowers to `tm_tensor.scatter` (codegen/scatter.py compiles those).

- `put(x, index, source, accumulate)`: an index_put on the flattened input (negative indices
  wrap in both; the scatter kernel wraps them);
- `index_reduce(x, dim, index, source, reduce, include_self)`: a `scatter_reduce` whose index
  tensor is `index` broadcast along `dim` to the source's shape, the same reduction, the same
  include_self (ATen's two kernels reduce the same elements: prod, mean, amax, amin);
- scatter, scatter_add, scatter_reduce with a negative dim: the same op on `dim % rank`
  (torch-mlir's import crashed the process on them);
- integer `scatter_reduce(..., "mean")` (and index_reduce through it): floor division, as ATen;
- `scatter(..., reduce="add"|"multiply")`: scatter_reduce sum/prod including self;
- `index_put` with one boolean mask whose values broadcast over each selected element: a select
  (torch-mlir's form goes through nonzero, whose size is data-dependent);
- `adaptive_max_pool3d`: the cases of PyTorch's own decomposition (an even split becomes
  `max_pool3d_with_indices`, output 1x1x1 amax/argmax; other sizes keep the op; unbatched
  inputs get a batch dim). torch-mlir's
  direct lowering read an uninitialised index accumulator ("reads an uninitialised tensor").
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _put(x, index, source, accumulate=False):
    flat = torch.index_put(x.reshape(-1), (index.reshape(-1),), source.reshape(-1), accumulate)
    return flat.reshape(x.shape)


def _index_reduce(x, dim, index, source, reduce, include_self=True):
    if x.dim() == 0:  # a 0-d tensor is indexed as a one-element row
        out = _index_reduce(x.reshape(1), 0, index.reshape(-1), source.reshape(1), reduce, include_self)
        return out.reshape(())
    dim = dim % x.dim()
    shape = [1] * source.dim()
    shape[dim] = -1
    idx = index.reshape(shape).expand(source.shape)
    return torch.scatter_reduce(x, dim, idx, source, reduce, include_self=include_self)


def _scatter_reduce_arg(x, dim, index, src, reduce):
    """`scatter(..., reduce="add"|"multiply")` (deprecated form): scatter_reduce sum/prod with
    self included, which is what it computes."""
    if reduce not in ("add", "multiply"):
        return NotImplemented
    return torch.scatter_reduce(x, dim, index, src, "sum" if reduce == "add" else "prod", include_self=True)


def _scatter_value_reduce(x, dim, index, value, reduce):
    src = torch.full(index.shape, value, dtype=x.dtype, device=x.device)
    return _scatter_reduce_arg(x, dim, index, src, reduce)


def _index_put_mask(x, indices, values, accumulate=False):
    """`x[mask] = v` with one boolean mask and values that broadcast over each selected element:
    a select (the selected count is data-dependent, a select needs no count). Other forms keep
    the op."""
    if len(indices) != 1 or indices[0] is None or indices[0].dtype != torch.bool:
        return NotImplemented
    mask = indices[0]
    rest = x.shape[mask.dim():]
    if values.dim() > len(rest) or any(v not in (1, r) for v, r in zip(reversed(values.shape), reversed(rest))):
        return NotImplemented
    keep = mask.reshape(tuple(mask.shape) + (1,) * len(rest))
    new = x + values if accumulate else values.to(x.dtype)
    return torch.where(keep, new, x)


def _nonnegative_dim(op):
    """`op(x, dim, ...)` with a negative dim as the same op on `dim % rank`: torch-mlir's import of
    scatter / scatter_add / scatter_reduce with a negative dim crashes the process (segfault or
    "LLVM ERROR: out of memory"), so such a call must never reach it."""

    def decomposed(x, dim, *args, **kwargs):
        if dim >= 0:
            return NotImplemented
        return op(x, dim % max(x.dim(), 1), *args, **kwargs)

    decomposed.__name__ = f"_nonnegative_dim_{op.__name__}"
    return decomposed


def _scatter_reduce_two(x, dim, index, src, reduce, include_self=True):
    if dim < 0:
        return aten.scatter_reduce.two(x, dim % max(x.dim(), 1), index, src, reduce, include_self=include_self)
    return _int_scatter_mean(x, dim, index, src, reduce, include_self)


def _int_scatter_mean(x, dim, index, src, reduce, include_self=True):
    """Integer `scatter_reduce(..., "mean")` divides with floor rounding in ATen; torch-mlir's
    lowering truncates (wrong for negative sums). Sum and count scatters, then a floor division;
    the count starts at 1 where self is included and is never below 1 (untouched elements keep
    their value)."""
    if reduce != "mean" or x.dtype.is_floating_point or x.is_complex() or x.dtype == torch.bool:
        return NotImplemented
    sums = torch.scatter_reduce(x, dim, index, src, "sum", include_self=include_self)
    counts = torch.full_like(x, 1 if include_self else 0)
    counts = torch.scatter_add(counts, dim, index, torch.ones_like(src))
    return torch.div(sums, counts.clamp(min=1), rounding_mode="floor")


def _adaptive_max_pool3d(x, output_size):
    """The cases of PyTorch's own decomposition, written here because torch 2.11 has none for this
    op (2.13 does): looking it up there failed the whole capture."""
    if x.dim() == 4:  # unbatched: torch-mlir lowers max_pool3d_with_indices only with a batch dim
        pooled = _adaptive_max_pool3d(x.unsqueeze(0), output_size)
        if pooled is NotImplemented:
            return NotImplemented
        return pooled[0].squeeze(0), pooled[1].squeeze(0)
    if x.dim() != 5 or 0 in x.shape[1:] or 0 in output_size:
        return NotImplemented  # ATen's errors, or empty results
    (d, h, w), (od, oh, ow) = x.shape[-3:], output_size
    if (od, oh, ow) == (1, 1, 1):  # indices count over the flattened D*H*W volume, as ATen's do
        values = torch.amax(x, dim=(-3, -2, -1), keepdim=True)
        return values, torch.argmax(x.flatten(-3), dim=-1).unsqueeze(-1).unsqueeze(-1).unsqueeze(-1)
    if d % od == 0 and h % oh == 0 and w % ow == 0:  # every window the same size, none overlapping
        return aten.max_pool3d_with_indices(x, [d // od, h // oh, w // ow])
    return NotImplemented


def table() -> dict:
    out = {aten.put.default: _put, aten.index_reduce.default: _index_reduce,
           aten.index_put.default: _index_put_mask, aten.scatter_reduce.two: _scatter_reduce_two,
           aten.adaptive_max_pool3d.default: _adaptive_max_pool3d}
    for op in (aten.scatter.src, aten.scatter.value, aten.scatter_add.default):
        out[op] = _nonnegative_dim(op)
    reduce_arg = {aten.scatter.reduce: _scatter_reduce_arg, aten.scatter.value_reduce: _scatter_value_reduce}
    for op, fn in reduce_arg.items():
        out[op] = (lambda fn, op: lambda x, dim, *a, **k: fn(x, dim % max(x.dim(), 1), *a, **k))(fn, op)
    return out
