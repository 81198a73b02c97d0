"""Counting and scan ops torch-mlir cannot lower, rewritten before import into ops that compile.

* `logcumsumexp`: torch-mlir lowers it as log(cumsum(exp(x))), which overflows for |x| > ~88 in
  fp32 (uniorch keeps that lowering eager, runtime/eager_only.py). Here each prefix i is shifted
  by its own max m_i: m_i + log(sum_{j <= i} exp(x_j - m_i)), every term <= 1 and the largest
  exactly 1, so nothing overflows and nothing that matters underflows. Rows are compared with
  every earlier column (n^2 work per row), as sorting.py's cummax, so only rows up to
  sorting.CUM_ROW_MAX are rewritten.
* `mode`: as ATen's CPU kernel, a sort of the row and the first longest run of equal values
  (run lengths by a cumsum and a scatter_add; no all-pairs, so rows of any length).
* `histc`, `histogram`, `histogramdd` (its `_histogramdd_*` parts): ATen's bin arithmetic per
  value, then an index_add of the weights into the flattened bins (scatter, which compiles).
* `segment_reduce` (lengths or offsets, any axis): each segment a masked reduction over the axis.

What the rewrites cannot do exactly (fp16/bf16 where ATen rounds every step, rows past the
all-pairs budget) returns NotImplemented and stays eager.
"""
from __future__ import annotations

import math
import struct

import torch

from .checks import require

from .sorting import CUM_ELEMS_MAX, CUM_ROW_MAX

aten = torch.ops.aten

LOW = (torch.float16, torch.bfloat16)


def _pairs_ok(x, n: int) -> bool:
    """Whether an n x n comparison per row stays within the all-pairs budget."""
    return 0 < n <= CUM_ROW_MAX and x.numel() * n <= CUM_ELEMS_MAX


def _logcumsumexp(x, dim):
    """ATen's scan adds one term at a time, log1p(exp(min - max)) + max, in the accumulate type
    (fp32 for fp16/bf16) and rounds each output once; the shifted all-pairs sum below is the same
    value up to summation order. Its special cases, made explicit: a prefix of only -inf is -inf,
    one holding +inf is +inf, one holding NaN is NaN: exactly the prefix max m_i whenever m_i is
    not finite."""
    if not x.dtype.is_floating_point:
        return NotImplemented  # integers are rejected by ATen; complex takes another kernel
    if x.dim() == 0:
        return x.clone()
    d = dim % x.dim()
    n = x.shape[d]
    if not _pairs_ok(x, n):
        return NotImplemented
    dtype = x.dtype
    work = x.float() if dtype in LOW else x
    row = torch.movedim(work, d, -1).unsqueeze(-2)  # [..., 1, n]: column j of every prefix i
    j = torch.arange(n, dtype=torch.int64, device=x.device)
    upto = j[None, :] <= j[:, None]  # [i, j]: j in the prefix ending at i
    m = torch.amax(torch.where(upto, row, float("-inf")), -1, keepdim=True)  # NaN if the prefix has one
    finite = torch.isfinite(m)
    shift = torch.where(finite, m, 0.0)
    total = torch.sum(torch.where(upto, torch.exp(row - shift), 0.0), -1, keepdim=True)
    out = torch.where(finite, shift + torch.log(total), m).squeeze(-1)
    return torch.movedim(out, -1, d).to(dtype)


def _mode(x, dim=-1, keepdim=False):
    """ATen's CPU kernel: sort the row, keep the first longest run of equal values (so the
    smallest of the most frequent values) and return the last element of that run. Here the
    sort is stable, so the run's last element is the value's last occurrence in the row, and its
    bits (0.0 or -0.0) are gathered from the input. Runs break where neighbours differ (`!=`), so
    a NaN is a run of its own, and NaNs sort last: one is the answer only when the row has nothing
    else. (ATen sorts rows holding NaNs with `<`, not an order there, so its answer then depends
    on the sort; rows without NaNs match exactly.)"""
    if x.is_complex() or x.numel() == 0:
        return NotImplemented
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    if x.dtype.is_floating_point:  # where ATen's own answer depends on its sort: eager decides
        require(~torch.isnan(x).any(), "mode: no NaN in the input (ATen's result there depends on its sort)")
    d = dim % x.dim()
    n = x.shape[d]
    src = torch.movedim(x, d, -1)
    work = src.to(torch.uint8) if x.dtype == torch.bool else src
    vals, order = torch.sort(work, dim=-1, stable=True)
    start = torch.ones_like(vals[..., :1], dtype=torch.int64)
    start = torch.cat([start, (vals[..., 1:] != vals[..., :-1]).to(torch.int64)], -1)
    run = torch.cumsum(start, -1) - 1  # each sorted element's run
    size = torch.zeros_like(run).scatter_add(-1, run, torch.ones_like(run))
    size = torch.gather(size, -1, run)  # each sorted element's run length
    j = torch.arange(n, dtype=torch.int64, device=x.device)
    top = torch.amax(size, -1, keepdim=True)
    first = torch.amin(torch.where(size == top, j, n), -1, keepdim=True)  # the first longest run
    index = torch.gather(order, -1, first + top - 1)  # its last element
    values = torch.gather(src, -1, index)
    values, index = torch.movedim(values, -1, d), torch.movedim(index, -1, d)
    if not keepdim:
        values, index = values.squeeze(d), index.squeeze(d)
    return values, index


TABLE = {
    aten.logcumsumexp.default: _logcumsumexp,
    aten.mode.default: _mode,
}


# ---- histograms ------------------------------------------------------------------------------
# ATen's CPU kernel (native/cpu/HistogramKernel.cpp) reads a D-dim coordinate per row of an
# (M, D) input, skips it when any coordinate lies outside [first edge, last edge] or is NaN, and
# maps each coordinate to a bin in one of three ways: histc truncates
# (x - left) * bins / (right - left) computed in the input dtype; histogram/histogramdd with bin
# counts take that estimate and correct it by a search over the neighbouring edges; with edge
# tensors it is a binary search. A value on the last edge falls into the last bin. Each row adds
# its weight (1 by default) to its bin, in the input dtype.

HIST_PAIRS_MAX = 1 << 24  # binary search as all-pairs comparisons: at most this many


def _hist_dtype_ok(x) -> bool:
    """fp16/bf16 bins come from arithmetic ATen rounds to 16 bits after every operation; only
    fp32/fp64 are rewritten (integers are rejected by ATen)."""
    return x.dtype in (torch.float32, torch.float64)


def _rounded(v: float, dtype) -> float:
    """A Python float as the input dtype holds it (fp32: the nearest float, as C's cast)."""
    if dtype == torch.float32:
        try:
            return struct.unpack("f", struct.pack("f", v))[0]
        except OverflowError:
            return math.copysign(math.inf, v)
    return v


def _scalar(v, like):
    return torch.full((), v, dtype=like.dtype, device=like.device)


def _linspace(left, right, bins: int):
    """The edges ATen's linspace kernel writes (RangeFactoriesKernel.cpp, its scalar loop):
    start + step * i for the first half, end - step * (steps - 1 - i) for the rest, in the input
    dtype, so both ends are exact. Its vectorized loop rounds interior edges differently by an
    ulp on some machines; only a value within an ulp of an interior edge can land differently."""
    steps = bins + 1
    step = (right - left) / bins
    i = torch.arange(steps, device=left.device).to(left.dtype)
    return torch.where(torch.arange(steps, device=left.device) < steps // 2,
                       left + step * i, right - step * (bins - i))


def _linear_bin(x, left, right, bins: int):
    """histc's estimate, ATen's operation order: truncate((x - left) * bins / (right - left)).
    Caller masks values outside [left, right] first (here they go to 0)."""
    inside = (x >= left) & (x <= right)
    est = (torch.where(inside, x, left) - left) * bins / (right - left)
    return torch.clamp(torch.trunc(est).to(torch.int64), 0, bins), inside


def _local_search(x, edges, pos, bins: int):
    """ATen's LINEAR_INTERPOLATION_WITH_LOCAL_SEARCH: upper_bound over edges[pos-1 .. pos+1]
    (clipped to the edge list), minus one. The first of those edges above x, else the window's
    end."""
    upper = torch.clamp(pos + 2, max=bins + 1)
    for k_off in (1, 0, -1):  # last assignment wins: the smallest k with edges[k] > x
        k = pos + k_off
        valid = (k >= 0) & (k <= bins)
        e = torch.index_select(edges, 0, torch.clamp(k, 0, bins).reshape(-1)).reshape(k.shape)
        upper = torch.where(valid & (e > x), k, upper)
    return upper - 1


def _binary_search(x, edges):
    """upper_bound(edges, x) - 1 for increasing edges: the count of edges <= x, minus one."""
    return torch.sum(edges <= x.unsqueeze(-1), -1) - 1


def _hist_counts(x2, edge_list, bins_list, weight, density, how):
    """The (M, D) input's histogram over the given edges (ATen's histogramdd_cpu_contiguous and
    its density normalization)."""
    flat = torch.zeros((), dtype=torch.int64, device=x2.device)
    keep = torch.ones(x2.shape[0], dtype=torch.bool, device=x2.device)
    for d, (edges, bins) in enumerate(zip(edge_list, bins_list)):
        x = x2[:, d]
        left, right = edges[0], edges[-1]
        if how == "binary":
            inside = (x >= left) & (x <= right)
            pos = _binary_search(torch.where(inside, x, left), edges)
        else:
            pos, inside = _linear_bin(x, left, right, bins)
            if how == "local":
                pos = _local_search(x, edges, pos, bins)
        pos = torch.clamp(pos, 0, bins - 1)  # the last bin is closed on the right
        flat = flat * bins + pos
        keep = keep & inside
    ones = torch.ones((), dtype=x2.dtype, device=x2.device)
    w = weight.reshape(-1) if weight is not None else ones.expand(x2.shape[0])
    total = 1
    for b in bins_list:
        total *= b
    w = torch.where(keep, w, torch.zeros((), dtype=x2.dtype, device=x2.device))
    hist = torch.zeros(total, dtype=x2.dtype, device=x2.device).index_add(0, flat.reshape(-1), w)
    hist = hist.reshape(list(bins_list))
    if density:  # ATen: divide by the total, then by each dimension's bin widths in turn
        hist = hist / hist.sum()
        for d, edges in enumerate(edge_list):
            shape = [1] * len(bins_list)
            shape[d] = bins_list[d]
            hist = hist / (edges[1:] - edges[:-1]).reshape(shape)
    return hist


def _outer_edges(x2, range_, widen: float):
    """(left, right) 0-d tensors per dimension: the given range, else the data's min and max;
    an empty range widened by `widen` each way (histogram: 0.5 as numpy; histc: 1), computed in
    double then rounded to the input dtype as ATen's linspace does."""
    out = []
    for d in range(x2.shape[1]):
        if range_ is not None:
            lo, hi = float(range_[2 * d]), float(range_[2 * d + 1])
            if lo == hi:
                lo, hi = lo - widen, hi + widen
            if not (math.isfinite(lo) and math.isfinite(hi) and _rounded(lo, x2.dtype) < _rounded(hi, x2.dtype)):
                return None  # ATen's error paths, or a range empty once rounded to the input dtype
            left, right = _scalar(lo, x2), _scalar(hi, x2)
        else:
            left, right = torch.amin(x2[:, d]), torch.amax(x2[:, d])
            # eager raises for a NaN or infinite data range: re-run eagerly to raise it
            require(torch.isfinite(left) & torch.isfinite(right), "histogram: finite data range")
            same = left == right
            left, right = torch.where(same, left - widen, left), torch.where(same, right + widen, right)
        out.append((left, right))
    return out


def _histc(x, bins=100, min=0, max=0):
    if not _hist_dtype_ok(x) or x.numel() == 0 or bins <= 0:
        return NotImplemented
    x2 = x.reshape(-1, 1)
    lo, hi = float(min), float(max)
    if lo == hi:  # the data's range, itself widened by 1 when empty
        edges = _outer_edges(x2, None, 1.0)
    else:
        edges = _outer_edges(x2, [lo, hi], 1.0)
    if edges is None:
        return NotImplemented
    left, right = edges[0]
    edge = torch.stack([left, right])  # histc needs only the ends
    return _hist_counts(x2, [edge], [bins], None, False, "linear")


def _histogramdd_edges(x2, bins_list, range_):
    outer = _outer_edges(x2, range_, 0.5)
    if outer is None:
        return None
    return [_linspace(left, right, b) for (left, right), b in zip(outer, bins_list)]


def _as_rows(x):
    """histogramdd's (M, D) view: all but the last dimension flattened."""
    return x.reshape(-1, x.shape[-1])


def _hist_ok(x, weight, bins_list) -> bool:
    if not _hist_dtype_ok(x) or x.numel() == 0 or any(b <= 0 for b in bins_list):
        return False
    return weight is None or weight.dtype == x.dtype


def _histogram_bin_ct(x, bins=100, *, range=None, weight=None, density=False):
    if not _hist_ok(x, weight, [bins]):
        return NotImplemented
    x2 = x.reshape(-1, 1)
    edges = _histogramdd_edges(x2, [bins], range)
    if edges is None:
        return NotImplemented
    return _hist_counts(x2, edges, [bins], weight, density, "local"), edges[0]


def _histogram_bins_tensor(x, bins, *, weight=None, density=False):
    nb = bins.numel() - 1
    if not _hist_ok(x, weight, [nb]) or bins.dtype != x.dtype or x.numel() * bins.numel() > HIST_PAIRS_MAX:
        return NotImplemented
    x2 = x.reshape(-1, 1)
    return _hist_counts(x2, [bins], [nb], weight, density, "binary"), bins.clone()


def _histogramdd_bin_edges(x, bins, *, range=None, weight=None, density=False):
    if not _hist_ok(x, weight, list(bins)) or x.dim() < 2:
        return NotImplemented
    edges = _histogramdd_edges(_as_rows(x), list(bins), range)
    return NotImplemented if edges is None else edges


def _histogramdd_from_bin_cts(x, bins, *, range=None, weight=None, density=False):
    if not _hist_ok(x, weight, list(bins)) or x.dim() < 2:
        return NotImplemented
    x2 = _as_rows(x)
    edges = _histogramdd_edges(x2, list(bins), range)
    if edges is None:
        return NotImplemented
    return _hist_counts(x2, edges, list(bins), weight, density, "local")


def _histogramdd_from_bin_tensors(x, bins, *, weight=None, density=False):
    counts = [b.numel() - 1 for b in bins]
    if not _hist_ok(x, weight, counts) or x.dim() < 2 or any(b.dtype != x.dtype for b in bins):
        return NotImplemented
    if x.numel() * max(b.numel() for b in bins) > HIST_PAIRS_MAX:
        return NotImplemented
    return _hist_counts(_as_rows(x), list(bins), counts, weight, density, "binary")


TABLE.update({
    aten.histc.default: _histc,
    aten.histogram.bin_ct: _histogram_bin_ct,
    aten.histogram.bins_tensor: _histogram_bins_tensor,
    aten._histogramdd_bin_edges.default: _histogramdd_bin_edges,
    aten._histogramdd_from_bin_cts.default: _histogramdd_from_bin_cts,
    aten._histogramdd_from_bin_tensors.default: _histogramdd_from_bin_tensors,
})


# ---- segment reductions ----------------------------------------------------------------------
# ATen's CPU kernel (native/SegmentReduce.cpp) walks each segment [start, end) along `axis` from
# an accumulator that starts at `initial` (when given) or the reduction's identity (sum/mean 0,
# prod 1, max -inf, min +inf), so `initial` takes part in every segment; max/min keep a NaN once
# seen; mean divides by the length, an empty mean is `initial` or NaN. Here every segment is a
# masked reduction over the whole axis (segments x axis length pairs per row): exact for
# max/min, the same up to summation order for sum/mean/prod.

SEGMENT_PAIRS_MAX = 1 << 24

_IDENTITY = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf")}


def _segment_bounds(lengths, offsets):
    """[..., S] segment starts and ends: from the running sum of lengths, or the offsets."""
    if offsets is not None:
        return offsets[..., :-1], offsets[..., 1:]
    ends = torch.cumsum(lengths, -1)
    return ends - lengths, ends


def _segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0, unsafe=False,
                    initial=None):
    bounds = offsets if offsets is not None else lengths
    if bounds is None or indices is not None or reduce not in _IDENTITY or not data.dtype.is_floating_point:
        return NotImplemented
    if data.dtype in LOW and reduce in ("sum", "mean", "prod"):
        return NotImplemented  # ATen accumulates in 16 bits, rounding after every element
    axis = axis % data.dim()
    if bounds.dim() != axis + 1:
        return NotImplemented
    n = data.shape[axis]
    segments = bounds.shape[-1] - (1 if offsets is not None else 0)
    if data.numel() * max(segments, 1) > SEGMENT_PAIRS_MAX or segments == 0:
        return NotImplemented
    starts, ends = _segment_bounds(bounds.to(torch.int64), offsets)
    if not unsafe:  # ATen's checks, which raise: eager runs instead when they fail
        sizes = ends - starts
        require((sizes >= 0).all() & (torch.sum(sizes, -1) == n).all(),
                "segment_reduce: segment lengths non-negative and summing to the axis size")
    inner = data.dim() - axis - 1
    k = torch.arange(n, dtype=torch.int64, device=data.device)
    member = (starts.unsqueeze(-1) <= k) & (k < ends.unsqueeze(-1))  # [..., S, n]
    member = member.reshape(tuple(member.shape) + (1,) * inner)  # [..., S, n, inner...]
    rows = data.unsqueeze(axis)  # [..., 1, n, inner...]
    fill = _IDENTITY[reduce]
    masked = torch.where(member, rows, torch.full((), fill, dtype=data.dtype, device=data.device))
    if reduce in ("sum", "mean"):
        out = torch.sum(masked, axis + 1)
    elif reduce == "prod":
        out = torch.prod(masked, axis + 1)
    else:
        out = (torch.amax if reduce == "max" else torch.amin)(masked, axis + 1)  # NaN propagates
    if initial is not None:
        init = torch.full((), initial, dtype=data.dtype, device=data.device)
        combine = {"sum": torch.add, "mean": torch.add, "prod": torch.mul,
                   "max": torch.maximum, "min": torch.minimum}[reduce]
        out = combine(init, out)
    if reduce == "mean":
        count = (ends - starts).reshape(tuple(ends.shape) + (1,) * inner).to(data.dtype)
        empty = torch.full((), float("nan") if initial is None else initial, dtype=data.dtype, device=data.device)
        out = torch.where(count > 0, out / count, empty)
    return out


TABLE[aten.segment_reduce.default] = _segment_reduce
