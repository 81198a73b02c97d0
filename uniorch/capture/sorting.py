"""Order statistics torch-mlir cannot lower, rewritten before import into ops that compile.

* `median`, `nanmedian` (PyTorch's lower median: element (n - 1) // 2 of the ascending row, NaN
  and the index of the row's first NaN when it holds one; nanmedian leaves NaNs out) become a
  stable sort and gathers (`sort.stable` itself compiles: runtime/compiler.py hands it to
  torch-mlir as the plain sort, since the sort kernel is stable, and keeps it for eager).
* `cummax`, `cummin` become a masked max (min) over each prefix, PyTorch's update rule made
  explicit: the value is the prefix's max (NaN once one was seen), its index the last index up to
  there holding it (ties update, `>=`; after NaNs, the latest NaN). Rows are compared with every
  earlier column, n^2 work per row, so only rows up to CUM_ROW_MAX are rewritten; longer ones stay
  eager.
* `topk(..., sorted=False)` becomes the sorted topk: PyTorch leaves the order of unsorted results
  unspecified (its CPU and CUDA kernels differ), torch-mlir lowers only the sorted form, and the
  sort kernel's order is one of the orders allowed. DeepSeek-V3's and its kin's routers ask for
  unsorted experts and groups.
* `searchsorted` (NeRF's inverse-CDF sampling, diffusion schedulers' timestep lookup, binning)
  becomes the binary search PyTorch's own `bucketize` decomposition runs: bit_length(M) steps over
  every value at once, each a gather of the probed boundary and a select. The comparisons are
  ATen's (`!(mid >= v)` moves right, `!(mid > v)` for the right side), so a NaN value lands past
  the end and NaNs sorted last in a row are never passed, as in eager.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

CUM_ROW_MAX = 1024  # longest row cummax/cummin compare all-pairs
CUM_ELEMS_MAX = 1 << 24  # and at most this many pairs in all


def _sortable(x) -> bool:
    return not (x.is_complex() or x.dtype == torch.bool)


def _iota_along(n: int, d: int, rank: int, device):
    return torch.arange(n, dtype=torch.int64, device=device).reshape([n] + [1] * (rank - d - 1))


def _median_dim(x, dim, keepdim: bool, ignore_nan: bool):
    if not _sortable(x) or x.numel() == 0:
        return NotImplemented
    if x.dim() == 0:  # its own median, NaN or not
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    d = dim % x.dim()
    n = x.shape[d]
    vals, idx = torch.sort(x, dim=d, stable=True)  # NaNs last, in row order
    if not x.dtype.is_floating_point:
        value, index = vals.narrow(d, (n - 1) // 2, 1), idx.narrow(d, (n - 1) // 2, 1)
    else:
        nans = torch.sum(torch.isnan(x), d, keepdim=True, dtype=torch.int64)
        if ignore_nan:  # the lower median of the row's numbers (the first NaN when there are none)
            pos = torch.div(torch.clamp(n - nans - 1, min=0), 2, rounding_mode="floor")
        else:  # NaN wins: the first NaN of the row, which the stable sort put at n - nans
            pos = torch.where(nans > 0, n - nans, (n - 1) // 2)
        value, index = torch.gather(vals, d, pos), torch.gather(idx, d, pos)
    if not keepdim:
        value, index = value.squeeze(d), index.squeeze(d)
    return value, index


def _median_all(x, ignore_nan: bool):
    if not _sortable(x) or x.numel() == 0:
        return NotImplemented
    return _median_dim(x.reshape(-1), 0, False, ignore_nan)[0]


def _cum_extreme(x, dim, largest: bool):
    if not _sortable(x):
        return NotImplemented
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    d = dim % x.dim()
    n = x.shape[d]
    if n == 0 or n > CUM_ROW_MAX or x.numel() * n > CUM_ELEMS_MAX:
        return NotImplemented
    row = torch.movedim(x, d, -1).unsqueeze(-2)  # [..., 1, n]: column j of every prefix i
    j = torch.arange(n, dtype=torch.int64, device=x.device)
    upto = j[None, :] <= j[:, None]  # [i, j]: j in the prefix ending at i
    if x.dtype.is_floating_point:
        worst = float("-inf") if largest else float("inf")
    else:
        info = torch.iinfo(x.dtype)
        worst = info.min if largest else info.max
    masked = torch.where(upto, row, worst)
    best = (torch.amax if largest else torch.amin)(masked, -1, keepdim=True)  # NaN if the prefix has one
    hit = row == best
    if x.dtype.is_floating_point:
        hit = hit | (torch.isnan(row) & torch.isnan(best))
    index = torch.amax(torch.where(upto & hit, j, -1), -1)  # the last index holding it
    value = torch.gather(torch.movedim(x, d, -1), -1, index)  # its own bits (the sign of a zero)
    return torch.movedim(value, -1, d), torch.movedim(index, -1, d)


def _topk_unsorted(x, k, dim=-1, largest=True, sorted=True):
    if sorted:
        return NotImplemented
    return aten.topk.default(x, k, dim, largest, True)


def _searchsorted(seq, values, *, out_int32: bool = False, right: bool = False, side=None, sorter=None):
    if seq.is_complex() or seq.dtype == torch.bool or (isinstance(values, torch.Tensor) and values.is_complex()):
        return NotImplemented
    right = right or side == "right"
    if sorter is not None:
        seq = torch.gather(seq, -1, sorter)
    shape = values.shape if isinstance(values, torch.Tensor) else ()
    m = seq.shape[-1]
    lo = torch.zeros(shape, dtype=torch.int64, device=seq.device)
    hi = lo + m
    for _ in range(int(m).bit_length()):  # lower_bound's steps: the range halves each time
        active = lo < hi
        mid = torch.clamp(torch.div(lo + hi, 2, rounding_mode="floor"), max=max(m - 1, 0))
        # (a 0-d index would be read as a Python int: a data-dependent size)
        probe = seq.index_select(0, mid.reshape(-1)).reshape(shape) if seq.dim() == 1 else torch.gather(seq, -1, mid)
        further = ~(probe > values) if right else ~(probe >= values)
        lo = torch.where(active & further, mid + 1, lo)
        hi = torch.where(active & ~further, mid, hi)
    return lo.to(torch.int32 if out_int32 else torch.int64)


TABLE = {
    aten.searchsorted.Tensor: _searchsorted,
    aten.searchsorted.Scalar: _searchsorted,
    aten.topk.default: _topk_unsorted,
    aten.median.dim: lambda x, dim, keepdim=False: _median_dim(x, dim, keepdim, False),
    aten.nanmedian.dim: lambda x, dim, keepdim=False: _median_dim(x, dim, keepdim, True),
    aten.median.default: lambda x: _median_all(x, False),
    aten.nanmedian.default: lambda x: _median_all(x, True),
    aten.cummax.default: lambda x, dim: _cum_extreme(x, dim, True),
    aten.cummin.default: lambda x, dim: _cum_extreme(x, dim, False),
}
