"""`_embedding_bag` and its backward as gathers plus segment reductions, in all three modes.

Why: torch-mlir lowers `embedding_bag` to linalg only in mode "sum" without padding_idx. Mean
fails with "failed to legalize torch.aten.embedding_bag.padding_idx", sum with a padding index
with "'tensor.cast' op operand type 'tensor<0xi64>' and result type 'tensor<Nxi64>' are cast
incompatible", max with "lowering torch to linalg failed". Plain sum lowers, but torch-mlir ignores
`per_sample_weights` there (a wrong answer, found by OpInfo), so every mode goes this way.
Outputs follow ATen's CPU kernel: (bags, offset2bag, bag_size, max_indices).
"""
from __future__ import annotations

import torch


def _sum_fast_path(weight, per_sample_weights, padding_idx) -> bool:
    """ATen's `is_fast_path` for mode "sum": its CPU kernel then leaves offset2bag empty."""
    return (weight.dtype in (torch.float32, torch.float16, torch.bfloat16) and weight.stride(1) == 1
            and padding_idx < 0 and (per_sample_weights is None or per_sample_weights.stride(0) == 1))


def _offset2bag(indices, offsets, num_bags):
    """Each index's bag, as ATen builds it: mark every bag start, running count - 1."""
    n = indices.shape[0]
    starts = offsets[:num_bags]
    marks = torch.zeros(n + 1, dtype=indices.dtype, device=indices.device).index_add(
        0, starts, torch.ones_like(starts, dtype=indices.dtype))
    return torch.cumsum(marks, 0, dtype=indices.dtype)[:n] - 1


def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    if mode not in (0, 1, 2):
        return NotImplemented
    num_bags = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
    offset2bag = _offset2bag(indices, offsets, num_bags)
    keep = indices != padding_idx  # padding_idx == -1: no padding index
    if mode == 2:
        return _max_bags(weight, indices, offsets, offset2bag, keep, num_bags)
    rows = weight.index_select(0, indices) * keep.to(weight.dtype)[:, None]
    if per_sample_weights is not None:  # ATen allows them in sum mode only
        rows = rows * per_sample_weights[:, None]
    bags = weight.new_zeros(num_bags, weight.shape[1]).index_add(0, offset2bag, rows)
    if mode == 0:
        zeros = offsets.new_zeros(num_bags)
        if _sum_fast_path(weight, per_sample_weights, padding_idx):  # ATen skips offset2bag there
            offset2bag = indices.new_empty(0)
        return bags, offset2bag, zeros, zeros.clone()
    counts = weight.new_zeros(num_bags).index_add(0, offset2bag, keep.to(weight.dtype))
    bags = bags / counts.clamp(min=1)[:, None]  # empty bags stay zero, as in ATen
    bag_size = counts.to(offsets.dtype)  # non-padding indices per bag
    return bags, offset2bag, bag_size, bag_size.clone()


def _max_bags(weight, indices, offsets, offset2bag, keep, num_bags):
    """Mode "max" as ATen's CPU kernel scans a bag: its first non-padding row, then each later value
    taken only when strictly greater. So a tie keeps the earliest row, a NaN counts only as a bag's
    first value (nothing is greater than it), an empty bag is 0 with max index 0, and max_indices
    (what the backward scatters to) holds the winning row's index."""
    n, dim = indices.shape[0], weight.shape[1]
    bag_size = torch.zeros(num_bags, dtype=offsets.dtype, device=offsets.device).index_add(
        0, offset2bag, keep.to(offsets.dtype))
    if n == 0:
        return weight.new_zeros(num_bags, dim), offset2bag, bag_size, offsets.new_zeros(num_bags, dim)
    rows = weight.index_select(0, indices)
    pos = torch.arange(n, device=indices.device)
    seg = offset2bag[:, None].expand(n, dim)
    # each bag's first non-padding position (n where it has none)
    first = torch.full((num_bags,), n, dtype=pos.dtype, device=pos.device).scatter_reduce(
        0, offset2bag, torch.where(keep, pos, n), "amin")
    first_rows = rows.index_select(0, first.clamp(max=n - 1))
    ordered = torch.where(keep[:, None] & ~rows.isnan(), rows, float("-inf"))
    top = torch.full((num_bags, dim), float("-inf"), dtype=rows.dtype, device=rows.device).scatter_reduce(
        0, seg, ordered, "amax")
    hits = keep[:, None] & (rows == top.index_select(0, offset2bag))
    earliest = torch.full((num_bags, dim), n, dtype=pos.dtype, device=pos.device).scatter_reduce(
        0, seg, torch.where(hits, pos[:, None], n), "amin")
    winner = torch.where(first_rows.isnan(), first[:, None], earliest).clamp(max=n - 1)
    empty = (bag_size == 0)[:, None]
    bags = torch.where(empty, 0, rows.gather(0, winner))
    max_indices = torch.where(empty, 0, indices.index_select(0, winner.flatten()).view(num_bags, dim))
    return bags, offset2bag, bag_size, max_indices


def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                           scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx=-1):
    """The weight's gradient of `_embedding_bag`: in modes "sum" and "mean" each index's row gets
    its bag's gradient (times its per-sample weight, or over its bag's size), summed by index_add;
    in mode "max" each non-empty bag's gradient goes to its max_indices, column by column.

    Why: torch-mlir cannot lower it and PyTorch has no decomposition. offset2bag is rebuilt from
    the offsets, since the forward leaves it empty on ATen's sum fast path."""
    if mode not in (0, 1, 2) or sparse or scale_grad_by_freq:
        return NotImplemented
    if mode == 2:
        rows = grad * (bag_size != 0).to(grad.dtype)[:, None]
        return grad.new_zeros(num_weights, grad.shape[1]).scatter_add(0, maximum_indices, rows)
    bag = _offset2bag(indices, offsets, grad.shape[0])
    rows = grad.index_select(0, bag)
    if mode == 1:
        rows = rows / bag_size.to(grad.dtype).clamp(min=1).index_select(0, bag)[:, None]
    elif per_sample_weights is not None:
        rows = rows * per_sample_weights.to(grad.dtype)[:, None]
    rows = rows * (indices != padding_idx).to(grad.dtype)[:, None]
    return grad.new_zeros(num_weights, grad.shape[1]).index_add(0, indices, rows)
