"""dK and dV of written-out attention from the transposed scores, so no T x T tensor is written.

After runtime/attention_recompute.py, autograd's backward of `P·v` and `q·kᵀ` reads P and dS
through transposes: dV = bmm(Pᵀ, dO) and dKᵀ = bmm(qᵀ, dS). A product whose first factor is a
transposed view reads that factor from memory, so P and dS were written (two T x T tensors, and
dP for dS). Here those two products are rebuilt keys-major: Sᵀ = k·qᵀ, its epilogue (scale, masks,
exp(· - lse)) applied to transposed operands, Pᵀ from it; dPᵀ = v·dOᵀ and dSᵀ from the same
pointwise ops as dS; then dV = bmm(Pᵀ, dO) and dK = bmm(dSᵀ, q). Each product's first factor is now
a contraction with a pointwise epilogue, which uniorch-fuse-chain computes in registers, tile by
tile (recomputing Sᵀ for dK as for dV: passes/recompute_hidden.py), as FlashAttention's backward
does. dQ = bmm(dS, k) already has that form.

Transposing a pointwise op means transposing its operands' last two dims: a mask or bias
broadcast over the scores (B x 1 x T x T, 1 x T, a row of lse) is read transposed, a 1-D operand
(along the keys) becomes a column. Views that keep the last two dims are views of the transposed
shape. Anything else on the way (a reduction, a view across the last two dims) leaves the graph
as it was, and so do scores too short for the chains (`recomputes_scores`: fewer keys than twice
the head dim), where one S, P and dS read transposed cost less than two of each.
"""
from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten

_POINTWISE = {
    aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar, aten.add.Tensor, aten.add.Scalar,
    aten.sub.Tensor, aten.sub.Scalar, aten.neg.default, aten.exp.default, aten.masked_fill.Scalar,
    aten.masked_fill.Tensor, aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.tanh.default,
    aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default, aten.minimum.default, aten.maximum.default,
    aten._to_copy.default, torch.ops.prims.convert_element_type.default, aten.clone.default, aten.detach.default,
    aten.alias.default}
_VIEWS = {aten.view.default, aten.reshape.default, aten._unsafe_view.default}


class _Abort(Exception):
    pass


def keys_major_gradients(graph: fx.Graph, score_product: fx.Node, product: fx.Node, make,
                         forward_tags: list) -> bool:
    """Rebuilds dV and dKᵀ as above for one attention: `score_product` the forward's bmm(q, kᵀ),
    `product` bmm(P', v) with P' a view of P. `make(op, *args, **kwargs)` adds a node
    at the graph's insertion point; the forward-side nodes made are appended to `forward_tags`
    (they must be recomputed, not saved). Returns whether it rewrote; the graph is unchanged if not."""
    made: list = []

    def add(before, op, *args, **kwargs):
        with graph.inserting_before(before):
            made.append(make(op, *args, **kwargs))
        return made[-1]

    from uniorch.passes.recompute_hidden import recomputes_scores

    _, rows, cols = score_product.meta["val"].shape
    if not recomputes_scores(rows, cols, score_product.args[0].meta["val"].shape[-1]):
        return False  # too few keys for the chains: P and dS read transposed cost less
    grad_v = _only_bmm(_transposes_of(product.args[0]), first=True)
    q, kt = score_product.args
    grad_kt = _only_bmm(_transposes_of(q), first=True)
    grad_q = _only_bmm(_transposes_of(kt), first=False)
    if grad_v is None or grad_kt is None or grad_q is None or grad_kt.args[1] is not grad_q.args[0]:
        return False
    d_s, d_out = grad_q.args[0], grad_v.args[1]
    d_p = _bmm_with_transposed(d_s, product.args[1])
    if d_p is None:
        return False
    try:
        # forward side: Sᵀ = k·qᵀ and what follows it as far as P and its view P'
        at = score_product.next
        swapped = {score_product: add(at, aten.bmm.default, add(at, aten.transpose.int, kt, 1, 2),
                                      add(at, aten.transpose.int, q, 1, 2))}
        _transpose_paths(graph, swapped, [product.args[0]], add)
        # the transposed scores and what follows them are recomputed, and so are the masks they
        # read where a mask is built from inputs by cheap ops (a triu of ones, `~keep`): saved,
        # they would cost the forward kernels of their own
        forward = list(swapped.values()) + [m for n in made if n not in swapped.values() for m in _built(n)]
        # backward side: dPᵀ = v·dOᵀ, and the ops from it and P to dS
        at = d_p.next
        swapped[d_p] = add(at, aten.bmm.default, product.args[1], add(at, aten.transpose.int, d_p.args[0], 1, 2))
        _transpose_paths(graph, swapped, [d_s], add)
    except _Abort:
        for n in reversed(made):
            graph.erase_node(n)
        return False
    new_v = add(grad_v, aten.bmm.default, swapped[product.args[0]], d_out)
    # laid out as bmm(qᵀ, dS) was: the views after it were traced on that layout
    new_kt = add(grad_kt, aten.clone.default, add(grad_kt, aten.transpose.int, add(
        grad_kt, aten.bmm.default, swapped[d_s], q), 1, 2), memory_format=torch.contiguous_format)
    forward_tags.extend(forward)
    for old, new in ((grad_v, new_v), (grad_kt, new_kt)):
        old.replace_all_uses_with(new)
        first = old.args[0]
        graph.erase_node(old)
        if not first.users:
            graph.erase_node(first)
    return True


# ops that build a mask or index table from inputs or nothing
_MASK_OPS = {
    aten.ones.default, aten.zeros.default, aten.full.default, aten.arange.default, aten.arange.start,
    aten.arange.start_step, aten.triu.default, aten.tril.default, aten.bitwise_not.default,
    aten.logical_not.default, aten.logical_and.default, aten.logical_or.default, aten.eq.Scalar, aten.eq.Tensor,
    aten.ne.Scalar, aten.ne.Tensor, aten.ge.Scalar, aten.ge.Tensor, aten.gt.Scalar, aten.gt.Tensor,
    aten.le.Scalar, aten.le.Tensor, aten.lt.Scalar, aten.lt.Tensor, aten.slice.Tensor, aten.select.int,
    aten.unsqueeze.default, aten.transpose.int, aten.permute.default, aten.expand.default} | _VIEWS | _POINTWISE


def _built(node: fx.Node) -> list:
    """`node` and its ancestors when all of them are mask-building ops over inputs (else [])."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if n.op in ("placeholder", "get_attr") or n in out:
            continue
        if n.op != "call_function" or n.target not in _MASK_OPS:
            return []
        out.append(n)
        stack.extend(n.all_input_nodes)
    return out


def swaps_matrix_dims(node: fx.Node) -> bool:
    """`node` transposes the two matrix dims of a batch of matrices (3-D)."""
    return node.target is aten.transpose.int and sorted(a % 3 for a in node.args[1:]) == [1, 2]


def _transposes_of(x: fx.Node) -> list:
    return [u for u in x.users if swaps_matrix_dims(u)]


def _only_bmm(transposes: list, first: bool):
    """The one bmm reading one of `transposes` as its first (or second) factor, or None."""
    found = [u for tr in transposes for u in tr.users
             if u.target is aten.bmm.default and u.args[0 if first else 1] is tr]
    return found[0] if len(found) == 1 else None


def _bmm_with_transposed(sink: fx.Node, v: fx.Node):
    """The bmm(dO, vᵀ) among `sink`'s ancestors (dP), or None."""
    stack, seen = [sink], set()
    while stack:
        n = stack.pop()
        if n in seen or n.op != "call_function":
            continue
        seen.add(n)
        if n.target is aten.bmm.default:
            w = n.args[1]
            if w.target is aten.transpose.int and w.args[0] is v:
                return n
            continue
        stack.extend(n.all_input_nodes)
    return None


def _transpose_paths(graph: fx.Graph, swapped: dict, sinks: list, add) -> None:
    """Adds the transposed form of every node on a path from a node of `swapped` (node -> its
    transposed form) to one of `sinks`, in graph order; raises _Abort at an op it cannot transpose."""
    on_path = _between(set(swapped), sinks)
    if not all(s in on_path for s in sinks):
        raise _Abort
    for n in list(graph.nodes):
        if n not in on_path or n in swapped:
            continue
        at = n.next
        if n.target in _VIEWS:
            src, shape = n.args[0], list(n.args[1])
            old = list(src.meta["val"].shape)
            if len(shape) < 2 or shape[-2:] != old[-2:]:
                raise _Abort
            # a reshape: the transposed value is not laid out for a view
            swapped[n] = add(at, aten.reshape.default, swapped[src], shape[:-2] + [shape[-1], shape[-2]])
        elif n.target is aten.expand.default:
            sizes = list(n.args[1])
            swapped[n] = add(at, n.target, swapped[n.args[0]], sizes[:-2] + [sizes[-1], sizes[-2]])
        elif n.target in _POINTWISE:
            args = [_operand(a, swapped, at, add) for a in n.args]
            swapped[n] = add(at, n.target, *args, **n.kwargs)
        else:
            raise _Abort


def _operand(a, swapped: dict, at: fx.Node, add):
    """`a` as read by the transposed op: its transposed form, or a view of it with the last two
    dims swapped (a 1-D tensor, broadcast along the last dim, as a column)."""
    if not isinstance(a, fx.Node):
        return a
    if a in swapped:
        return swapped[a]
    val = a.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise _Abort
    if val.dim() == 0:
        return a
    if val.dim() == 1:
        return add(at, aten.unsqueeze.default, a, -1)
    return add(at, aten.transpose.int, a, -2, -1)


def _between(sources: set, sinks: list) -> set:
    """The nodes on a path from one of `sources` to one of `sinks` (both included) through ops
    this module transposes: a product or a reduction on the way (the output O, rowsum(dO O)) ends
    a path, and its result is an operand like any other."""
    down, stack = set(), list(sources)
    while stack:
        n = stack.pop()
        if n not in down and (n in sources or n.target in _POINTWISE | _VIEWS | {aten.expand.default}):
            down.add(n)
            stack.extend(n.users)
    out, stack = set(), [s for s in sinks if s in down]
    while stack:
        n = stack.pop()
        if n not in out and n in down:
            out.add(n)
            stack.extend(n.all_input_nodes)
    return out


__all__ = ["keys_major_gradients", "swaps_matrix_dims"]
