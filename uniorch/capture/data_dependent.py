"""Ops whose output size or Python value depends on the data: computed in kernels at a bound
size, trimmed (or read out) at the model's boundary.

Why: nonzero, masked_select, unique, indexing by a boolean mask and friends return as many rows
as the data says; `item`
returns a Python value. Kernels need static shapes. As Inductor does with its
unbacked sizes, the decompositions below compute the result padded to its largest possible size
plus the true count (cumsum positions and a scatter: all ops that compile), then read the count
(`.item()`, an unbacked size in the captured graph) and slice. When such a slice or scalar is a
graph output, `bound_outputs` moves the slicing to the runtime: the graph returns the padded
tensor and the count, and `CapturedGraph.finish` narrows it (one host sync, as eager's own
kernels need to size their output). Ops after a trim up to a sum or mean over its rows are
computed at the padded size by masked_reductions.py; a count that feeds other ops stays as
captured, and those ops run eagerly.

Not covered: `equal` and `allclose` return a C++ bool, which fake-tensor tracing cannot leave
unknown, so their capture fails and they run eagerly (with everything that depends on them).
"""
from __future__ import annotations

import dataclasses

import torch
import torch.fx as fx

aten = torch.ops.aten


def _count(mask_flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Write position of each kept element (n for dropped ones: the padded row) and the count."""
    n = mask_flat.shape[0]
    pos = torch.cumsum(mask_flat.to(torch.int64), 0) - 1
    return torch.where(mask_flat, pos, n), mask_flat.to(torch.int64).sum()


def _trimmed(padded: torch.Tensor, count: torch.Tensor, bound: int, dim: int = 0) -> torch.Tensor:
    k = count.item()
    torch._check(k >= 0)
    torch._check(k <= bound)
    return padded.narrow(dim, 0, k)


def _unravel(flat: torch.Tensor, shape) -> list[torch.Tensor]:
    """Row-major coordinates in `shape` of the flat positions `flat`, one tensor per dim."""
    coords, rest = [], flat
    for size in reversed(shape):
        coords.append(rest % size)
        rest = rest // size
    return coords[::-1]


def _nonzero(x):
    if x.numel() == 0 or x.is_complex():
        return NotImplemented
    flat = (x != 0).reshape(-1)
    n = flat.shape[0]
    where, count = _count(flat)
    coords = _unravel(torch.arange(n, device=x.device), x.shape)  # of every element
    coords = torch.stack(coords, -1) if coords else torch.zeros(n, 0, dtype=torch.int64, device=x.device)
    padded = torch.zeros(n + 1, x.dim(), dtype=torch.int64, device=x.device).index_put((where,), coords)
    return _trimmed(padded, count, n)


def _masked_select(x, mask):
    x, mask = torch.broadcast_tensors(x, mask)
    if x.numel() == 0 or x.is_complex():
        return NotImplemented
    flat, keep = x.reshape(-1), mask.reshape(-1)
    n = flat.shape[0]
    where, count = _count(keep)
    padded = torch.zeros(n + 1, dtype=x.dtype, device=x.device).index_put((where,), flat)
    return _trimmed(padded, count, n)


def _index_by_mask(x, indices):
    """`x[..., mask, ...]`: one boolean (or uint8) index with only full slices beside it. The rows
    the mask keeps are gathered at the padded size, then trimmed to the count: the gather is a
    kernel, only the trim waits for the count. torch-mlir lowers a boolean index as an integer one
    (wrong shapes; for some graphs it aborted the process, LLVM out of memory)."""
    masks = [i for i, t in enumerate(indices) if t is not None and t.dtype in (torch.bool, torch.uint8)]
    if len(masks) != 1 or any(t is not None for i, t in enumerate(indices) if i != masks[0]) or x.is_complex():
        return NotImplemented
    p, mask = masks[0], indices[masks[0]].to(torch.bool)
    if tuple(mask.shape) != tuple(x.shape[p:p + mask.dim()]) or mask.numel() == 0:
        return NotImplemented
    keep = mask.reshape(-1)
    n = keep.shape[0]
    where, count = _count(keep)
    flat = torch.zeros(n + 1, dtype=torch.int64, device=x.device).index_put(
        (where,), torch.arange(n, device=x.device))  # padding rows read element 0
    padded = aten.index.Tensor(x, [None] * p + _unravel(flat, mask.shape))
    return _trimmed(padded, count, n, dim=p)


def _runs(values: torch.Tensor):
    """Group id per element of `values` (flat) where a new group starts at each change (NaN never
    equals NaN, so each NaN is its own group, as in ATen), and the number of groups."""
    n = values.shape[0]
    starts = torch.ones(n, dtype=torch.bool, device=values.device)
    if n > 1:
        starts = torch.cat([starts[:1], values[1:] != values[:-1]])
    group = torch.cumsum(starts.to(torch.int64), 0) - 1
    return starts, group, starts.to(torch.int64).sum()


def _uniques(ordered, starts, group, count, n, return_counts):
    values = torch.zeros(n + 1, dtype=ordered.dtype, device=ordered.device).index_put(
        (torch.where(starts, group, n),), ordered)
    values = _trimmed(values, count, n)
    if not return_counts:
        return values, torch.zeros(0, dtype=torch.int64, device=ordered.device)
    counts = torch.zeros(n, dtype=torch.int64, device=ordered.device).index_add(0, group, torch.ones_like(group))
    return values, counts[: values.shape[0]]


def _unique2(x, sorted=True, return_inverse=False, return_counts=False):
    """`torch.unique`: a sort, runs of equal values, their first elements. `sorted=False` leaves
    the order unspecified, and ATen's CPU and CUDA kernels sort anyway ("faster than a hash
    table", Unique.cpp), so both give eager's order."""
    if x.numel() == 0 or x.is_complex() or x.dtype == torch.bool:
        return NotImplemented
    flat = x.reshape(-1)
    n = flat.shape[0]
    ordered, perm = torch.sort(flat, stable=True)
    starts, group, count = _runs(ordered)
    values, counts = _uniques(ordered, starts, group, count, n, return_counts)
    inverse = torch.zeros(0, dtype=torch.int64, device=x.device)
    if return_inverse:
        inverse = torch.zeros(n, dtype=torch.int64, device=x.device).index_put((perm,), group).reshape(x.shape)
    return values, inverse, counts


def _unique_consecutive(x, return_inverse=False, return_counts=False, dim=None):
    if dim is not None or x.numel() == 0 or x.is_complex() or x.dtype == torch.bool:
        return NotImplemented
    flat = x.reshape(-1)
    n = flat.shape[0]
    starts, group, count = _runs(flat)
    values, counts = _uniques(flat, starts, group, count, n, return_counts)
    inverse = group.reshape(x.shape) if return_inverse else torch.zeros(0, dtype=torch.int64, device=x.device)
    return values, inverse, counts


TABLE = {
    aten.nonzero.default: _nonzero,
    aten.masked_select.default: _masked_select,
    aten.index.Tensor: _index_by_mask,
    aten._unique2.default: _unique2,
    aten.unique_consecutive.default: _unique_consecutive,
}


# -- the boundary ----------------------------------------------------------------------------------

_SCALAR_READ = aten._local_scalar_dense.default


def _is_sym(v) -> bool:
    return isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) or (
        isinstance(v, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in v.shape))


def bound_outputs(cg) -> bool:
    """Graph outputs that are `padded[:count.item()]` or `t.item()` become `padded` plus `count`
    (kind "size") or `t`, read at the boundary. Done only when no symbolic value is left in the
    graph afterwards; otherwise the graph stays as captured. Returns whether it changed."""
    gm = cg.graph_module
    if not any(n.op == "call_function" and n.target is _SCALAR_READ for n in gm.graph.nodes):
        return False
    out_node = gm.graph.output_node()
    values, outputs = list(out_node.args[0]), list(cg.outputs)
    extra_values, extra_outputs = [], []
    for i, (v, spec) in enumerate(zip(values, outputs)):
        if not isinstance(v, fx.Node) or v.op != "call_function":
            continue
        if v.target is _SCALAR_READ:
            values[i], outputs[i] = v.args[0], dataclasses.replace(spec, read="item")
        elif v.target is aten.slice.Tensor and _is_trim(v):
            count = v.args[3].args[0]
            index = len(values) + len(extra_values)
            extra_values.append(count)
            extra_outputs.append(type(spec)("size"))
            values[i], outputs[i] = v.args[0], dataclasses.replace(spec, read=("narrow", v.args[1], index))
    doomed = {n for n in gm.graph.nodes if n.op == "call_function" and (
        _is_sym(n.meta.get("val")) or n.target in (_SCALAR_READ, aten._assert_scalar.default,
                                                   aten.sym_constrain_range_for_size.default))}
    new_values = values + extra_values
    if any(v in doomed for v in new_values) or any(u not in doomed for n in doomed for u in n.users
                                                    if u is not out_node):
        return False  # a data-dependent value feeds more ops: leave it as captured
    out_node.args = (tuple(new_values),)
    for node in reversed(list(gm.graph.nodes)):
        if node in doomed:
            gm.graph.erase_node(node)
    gm.recompile()
    cg.outputs = outputs + extra_outputs
    return True


def _is_trim(node: fx.Node) -> bool:
    """slice(padded, dim, 0, count.item()) with a static padded shape."""
    args = list(node.args) + [None] * (5 - len(node.args))
    _, dim, start, end, step = args[:5]
    return (isinstance(end, fx.Node) and end.target is _SCALAR_READ and start in (0, None) and step in (1, None)
            and not _is_sym(node.args[0].meta.get("val")))
