"""A gated MLP's fused gate/up projection as two products of the same input.

Phi-3 (and Phi-4, Phi-3.5-MoE's dense kin) compute `x @ W_gate_up` once and `chunk(2)` it:
`act(gate) * up`. The two halves are different columns of one output, so no tile of that product
holds a gate value and its up value together, and the output (2 x hidden) was written and read
back by the next kernel. As two products of x, `x @ W[:, :h]` and `x @ W[:, h:]` (the weight's
rows as views, nothing copied), they are a gated pair that uniorch-fuse-siblings computes in one
kernel with an accumulator each (passes/fuse_siblings.py `_merge_gated`): only the gated product
is written.

Only a split in two equal halves of a product read by nothing else, whose halves meet in one
multiplication a few elementwise steps on: a fused q/k/v projection split in three stays one
product (three would read x three times where the kernels cannot share it).
"""
from __future__ import annotations

import operator

import torch

from .symbolic_views import _set_tensor_meta

aten = torch.ops.aten
# steps after the product that treat each column alike, given a scalar or a per-column vector
_COLUMNWISE = (aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.div.Tensor)
_REACH = 4  # elementwise steps from a half to the multiplication that gates it


def _halves(node) -> list | None:
    """The two getitem users of a split into two equal halves along the last dim, in order."""
    if node.target is aten.split_with_sizes.default:
        src, sizes = node.args[0], list(node.args[1])
        dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    elif node.target is aten.split.Tensor:
        src, size = node.args[0], node.args[1]
        dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
        n = _last(src)
        sizes = [size, size] if isinstance(size, int) and isinstance(n, int) and 2 * size == n else []
    else:
        return None
    val = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    if (not isinstance(val, torch.Tensor) or len(sizes) != 2 or sizes[0] != sizes[1]
            or not isinstance(sizes[0], int) or dim % val.dim() != val.dim() - 1):
        return None
    items = [None, None]
    for u in node.users:
        if u.target is not operator.getitem or u.args[1] not in (0, 1) or items[u.args[1]] is not None:
            return None
        items[u.args[1]] = u
    return items if all(i is not None for i in items) else None


def _last(node):
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val.shape[-1] if isinstance(val, torch.Tensor) and val.dim() else None


def _ahead(node) -> set:
    """The nodes a few elementwise steps on from `node` (its users, their users, ...)."""
    seen, frontier = set(), {node}
    for _ in range(_REACH):
        frontier = {u for n in frontier for u in n.users if u.op == "call_function"} - seen
        seen |= frontier
    return seen


def _gated(items) -> bool:
    meet = _ahead(items[0]) & _ahead(items[1])
    return any(n.target is aten.mul.Tensor for n in meet)


def _product(src):
    """(mm node, the elementwise steps after it, view or None) behind a split's input: the product
    through steps that add or scale each column alike (a bias, as linear's addmm decomposes:
    mm * 1 + bias * 1), then one view. Each step and the product are read by nothing else."""
    view = None
    if src.target is aten.view.default and isinstance(src.args[0], torch.fx.Node):
        view, src = src, src.args[0]
        if not isinstance(view.args[1], (list, tuple)) or _last(view) != _last(src):
            return None
    n, steps = _last(src), []
    while src.op == "call_function" and src.target in _COLUMNWISE and len(src.users) == 1:
        main = [i for i, x in enumerate(src.args) if isinstance(x, torch.fx.Node) and _last(x) == n
                and x.meta["val"].dim() == 2]
        others = [x for i, x in enumerate(src.args) if i not in main]
        if len(main) != 1 or src.kwargs or not all(_per_column(x, n) for x in others):
            return None
        steps.append((src, main[0]))
        src = src.args[main[0]]
    if src.target is not aten.mm.default or len(src.users) != 1:
        return None
    return src, steps[::-1], view


def _per_column(x, n) -> bool:
    """A scalar, or a vector over the product's columns (a bias)."""
    if not isinstance(x, torch.fx.Node):
        return isinstance(x, (int, float, bool))
    val = x.meta.get("val")
    return isinstance(val, torch.Tensor) and (val.dim() == 0 or (val.dim() == 1 and val.shape[0] in (1, n)))


def _call(graph, target, args, like):
    node = graph.call_function(target, args)
    node.meta = {k: v for k, v in like.meta.items() if k not in ("val", "tensor_meta")}
    node.meta["val"] = target(*torch.fx.node.map_aggregate(
        args, lambda a: a.meta["val"] if isinstance(a, torch.fx.Node) else a))
    _set_tensor_meta(node)
    return node


def _sliced(graph, x, lo: int, hi: int, like):
    """A per-column vector's entries [lo, hi); a scalar, or a vector of one broadcast, as it is."""
    if isinstance(x, torch.fx.Node) and x.meta["val"].dim() == 1 and x.meta["val"].shape[0] != 1:
        return _call(graph, aten.slice.Tensor, (x, 0, lo, hi), like)
    return x


def _columns(graph, b, start: int, stop: int, like):
    """Columns [start, stop) of the product's right factor: rows of the weight under a transpose."""
    if b.target is aten.permute.default and list(b.args[1]) == [1, 0]:
        rows = _call(graph, aten.slice.Tensor, (b.args[0], 0, start, stop), like)
        return _call(graph, aten.permute.default, (rows, [1, 0]), like)
    return _call(graph, aten.slice.Tensor, (b, 1, start, stop), like)


def split_gated_projections(gm: torch.fx.GraphModule) -> int:
    """Rewrites each fused gate/up projection as two products; returns how many."""
    done = 0
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        items = _halves(node)
        if items is None or not _gated(items):
            continue
        found = _product(node.args[0])
        if found is None:
            continue
        prod, steps, view = found
        a, b = prod.args
        half = node.args[1][0] if node.target is aten.split_with_sizes.default else node.args[1]
        with graph.inserting_before(node):
            for i, item in enumerate(items):
                lo, hi = i * half, (i + 1) * half
                part = _call(graph, aten.mm.default, (a, _columns(graph, b, lo, hi, prod)), prod)
                for step, main in steps:
                    args = [part if j == main else _sliced(graph, x, lo, hi, step) for j, x in enumerate(step.args)]
                    part = _call(graph, step.target, tuple(args), step)
                if view is not None:
                    part = _call(graph, aten.view.default, (part, [*view.args[1][:-1], half]), view)
                item.replace_all_uses_with(part)
        done += 1
    if done:
        graph.eliminate_dead_code()
        gm.recompile()
    return done
