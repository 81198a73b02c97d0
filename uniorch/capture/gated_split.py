"""A gated MLP's fused gate/up projection as two products of the same input.

Phi-3 (and Phi-4, Phi-3.5-MoE's dense kin) compute `x @ W_gate_up` once and `chunk(2)` it:
`act(gate) * up`. The two halves are different columns of one output, so no tile of that product
holds a gate value and its up value together, and the output (2 x hidden) was written and read
back by the next kernel. As two products of x, `x @ W[:, :h]` and `x @ W[:, h:]` (the weight's
rows as views, nothing copied), they are a gated pair that uniorch-fuse-siblings computes in one
kernel with an accumulator each (passes/fuse_siblings.py `_merge_gated`): only the gated product
is written.

A split in two equal halves of a product read by nothing else, whose halves meet in one
multiplication a few elementwise steps on. A fused q/k/v projection split in three or more
(GPT-2's `c_attn`) stays one product, unless parts of it are returned concatenated (a cache's
keys and values, transposed and appended to the past ones): the fused output then needs a copy
kernel writing them into the cache, where a product per part writes them from its epilogue
(`_returned_parts` weighs that against reading x once more per product; products up to
MAX_SIBLING_N wide share x's tiles).
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
    mm * 1 + bias * 1) or convert its type, then one view. Each step and the product are read by
    nothing else."""
    view = None
    if src.target is aten.view.default and isinstance(src.args[0], torch.fx.Node):
        view, src = src, src.args[0]
        if not isinstance(view.args[1], (list, tuple)) or _last(view) != _last(src):
            return None
    n, steps = _last(src), []
    while src.op == "call_function" and len(src.users) == 1:
        if src.target is torch.ops.prims.convert_element_type.default and isinstance(src.args[0], torch.fx.Node):
            steps.append((src, 0))  # a 16-bit product rounded after its bias (bf16 addmm)
            src = src.args[0]
            continue
        if src.target not in _COLUMNWISE:
            break
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
    """A per-column vector's entries [lo, hi); a scalar, or a vector of one broadcast, as it is.
    Sliced before the elementwise steps computing it from one vector (a 16-bit bias widened, then
    scaled by linear's decomposed `bias * 1`), so each product computes its own entries and no
    computed vector is shared by all of them."""
    if not isinstance(x, torch.fx.Node) or x.meta["val"].dim() != 1 or x.meta["val"].shape[0] == 1:
        return x
    tensors = [i for i, v in enumerate(x.args) if isinstance(v, torch.fx.Node)]
    if (x.op == "call_function" and x.target in (*_COLUMNWISE, torch.ops.prims.convert_element_type.default)
            and len(tensors) == 1 and not x.kwargs and x.args[tensors[0]].meta["val"].shape == x.meta["val"].shape):
        args = list(x.args)
        args[tensors[0]] = _sliced(graph, args[tensors[0]], lo, hi, like)
        return _call(graph, x.target, tuple(args), like)
    return _call(graph, aten.slice.Tensor, (x, 0, lo, hi), like)


def _columns(graph, b, start: int, stop: int, like):
    """Columns [start, stop) of the product's right factor: rows of the weight under a transpose,
    sliced before a conversion (a 16-bit weight widened for the product), so each product widens
    its own columns and no widened copy of the whole weight is shared."""
    if b.target is torch.ops.prims.convert_element_type.default and isinstance(b.args[0], torch.fx.Node):
        return _call(graph, b.target, (_columns(graph, b.args[0], start, stop, like), *b.args[1:]), like)
    if b.target is aten.permute.default and list(b.args[1]) == [1, 0]:
        rows = _call(graph, aten.slice.Tensor, (b.args[0], 0, start, stop), like)
        return _call(graph, aten.permute.default, (rows, [1, 0]), like)
    return _call(graph, aten.slice.Tensor, (b, 1, start, stop), like)


def split_gated_projections(gm: torch.fx.GraphModule) -> int:
    """Rewrites each fused gate/up projection as two products, and each fused q/k/v projection
    whose keys and values are returned (`_returned_parts`) as one product a part; returns how many."""
    done = 0
    graph = gm.graph
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        items = _halves(node)
        if items is not None and _gated(items):
            half = node.args[1][0] if node.target is aten.split_with_sizes.default else node.args[1]
            ranges = [(i * half, (i + 1) * half) for i in range(2)]
        else:
            items = _parts(node)
            if items is None:
                continue
            ranges = items[1]
            items = items[0]
        found = _product(node.args[0])
        if found is None:
            continue
        if len(ranges) > 2 and not _returned_parts(items, ranges, found[0]):
            continue
        _split(graph, node, items, ranges, found)
        done += 1
    if done:
        graph.eliminate_dead_code()
        gm.recompile()
    return done


def _split(graph, node, items, ranges, found) -> None:
    prod, steps, view = found
    a, b = prod.args
    with graph.inserting_before(node):
        for item, (lo, hi) in zip(items, ranges):
            x = a
            if a.target is torch.ops.prims.convert_element_type.default:  # each product widens x itself
                x = _call(graph, a.target, a.args, a)
            part = _call(graph, aten.mm.default, (x, _columns(graph, b, lo, hi, prod)), prod)
            for step, main in steps:
                args = [part if j == main else _sliced(graph, x, lo, hi, step) for j, x in enumerate(step.args)]
                part = _call(graph, step.target, tuple(args), step)
            if view is not None:
                part = _call(graph, aten.view.default, (part, [*view.args[1][:-1], hi - lo]), view)
            item.replace_all_uses_with(part)


def _parts(node):
    """([the getitem users], [(lo, hi)]) of a split of a product's output into three or more
    pieces along its last dim (GPT-2's `c_attn(x).split(d, dim=2)`), or None."""
    if node.target is aten.split_with_sizes.default:
        sizes = list(node.args[1])
    elif node.target is aten.split.Tensor and isinstance(node.args[1], int):
        n = _last(node.args[0])
        sizes = [node.args[1]] * (n // node.args[1]) if isinstance(n, int) and n % node.args[1] == 0 else []
    else:
        return None
    src = node.args[0]
    val = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    if (not isinstance(val, torch.Tensor) or len(sizes) < 3 or not all(isinstance(x, int) for x in sizes)
            or dim % val.dim() != val.dim() - 1):
        return None
    items = [None] * len(sizes)
    for u in node.users:
        if u.target is not operator.getitem or not 0 <= u.args[1] < len(sizes) or items[u.args[1]] is not None:
            return None
        items[u.args[1]] = u
    if any(i is None for i in items):
        return None
    ends = [sum(sizes[:i + 1]) for i in range(len(sizes))]
    return items, [(e - n, e) for e, n in zip(ends, sizes)]


# what a returned part reaches the output through: views, and a cache's concatenation with the
# past keys (which concat_in_place lets a product's epilogue write into). Only a part that is
# concatenated counts: one returned as a view alone is a view of the fused output in the compiled
# call too (passes/returned_views.py), no copy and eager's aliasing, which a split would lose
_VIEWS = (aten.view.default, aten.permute.default, aten.transpose.int, aten.clone.default, aten.expand.default,
          aten.unsqueeze.default, aten._unsafe_view.default, aten.alias.default, aten.cat.default)


def _returned_parts(items, ranges, prod) -> bool:
    """Whether splitting saves bytes: parts returned concatenated (a cache's keys and values,
    transposed to (batch, heads, tokens, dim) and appended to the past ones) are copied out of the
    fused output by a kernel of their own, which separate products write from their epilogues;
    the cost is reading the input once more per extra product (MAX_SIBLING_N-wide products
    share it)."""
    from uniorch.passes.fuse_siblings import MAX_SIBLING_N, MAX_SIBLINGS

    returned = 0
    for item, (lo, hi) in zip(items, ranges):
        frontier, seen = [(item, False)], set()
        while frontier:
            n, copied = frontier.pop()
            if n in seen:
                continue
            seen.add(n)
            for u in n.users:
                if u.op == "output" and copied:
                    returned += hi - lo
                    frontier = []
                    break
                if u.op == "call_function" and u.target in _VIEWS:
                    frontier.append((u, copied or u.target is aten.cat.default))
    if not returned:
        return False
    if len(ranges) <= MAX_SIBLINGS and all(hi - lo <= MAX_SIBLING_N for lo, hi in ranges):
        return True
    k = _last(prod.args[0])
    return isinstance(k, int) and 2 * returned >= (len(ranges) - 1) * k
