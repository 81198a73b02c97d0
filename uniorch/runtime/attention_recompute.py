"""Written-out attention in training: the backward recomputes the attention probabilities from
the scores' log-sum-exp where eager autograd saves them.

`softmax(q @ kᵀ * s + mask) @ v` (nanoGPT's attention without flash, transformers' "eager"
attention) records `_softmax` in the joint graph, and both `_softmax_backward_data` and the
gradient of `v` read its output P. So the min-cut partitioner saves P, batch x heads x T x T, and
the forward must write it: at GPT-2's sizes (8 x 12 x 1024²) that is 400 MB per layer, and the
forward cannot be one flash-attention kernel (uniorch-fuse-attention stores no T x T tensor).

This rewrite, run on the joint graph before partitioning, gives it what SDPA's training path has
(capture/fused_attention.py). The softmax becomes P = exp(S - lse), with lse the scores'
log-sum-exp over the keys (0 for a row of only -inf, which then gets 0, as the safe softmax, where
eager's softmax gives NaN), one float per query that the forward's flash kernel returns from its
running max and sum (uniorch-fuse-attention reads exp(S - lse) as the softmax it is). The ops from
the q·kᵀ product to P are tagged MUST_RECOMPUTE (activation checkpointing's tags, which the
partitioner honours) and lse MUST_SAVE: the forward saves q, k, v, the output and lse, never a
T x T tensor, and the backward's P is exp(S - lse) in the epilogue of the contraction recomputing
S. `_softmax_backward_data`'s row sums rowsum(dP P) become rowsum(dO O) (FlashAttention's form),
read from T x d tensors. dK and dV are then computed from the transposed scores
(runtime/attention_transpose.py), so that the backward, too, writes no T x T tensor.

Left as it is: dropout on P (its mask would be saved all the same), P read by the forward other
than by the product with v (returned attention weights), scores from anything but one batched
product through pointwise ops.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from .attention_transpose import keys_major_gradients, swaps_matrix_dims

aten = torch.ops.aten

# ops that pass P's values on unchanged (or converted)
_PASS_ON = {aten.clone.default, aten.detach.default, aten.alias.default, aten.expand.default,
            aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten._to_copy.default,
            aten.transpose.int, aten.permute.default, aten.unsqueeze.default, aten.squeeze.dim,
            torch.ops.prims.convert_element_type.default}
# what may lie between the q·kᵀ product and the scores: recomputing it is as exact as the forward
_SCORE_OPS = _PASS_ON | {
    aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar, aten.add.Tensor, aten.add.Scalar,
    aten.sub.Tensor, aten.sub.Scalar, aten.neg.default, aten.masked_fill.Scalar, aten.masked_fill.Tensor,
    aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.tanh.default, aten.clamp.default,
    aten.clamp_min.default, aten.clamp_max.default, aten.minimum.default, aten.maximum.default,
    aten.bmm.default}


def recompute_attention(joint: fx.GraphModule) -> int:
    """Rewrites each written-out attention of the joint graph as above; returns how many."""
    from torch.utils.checkpoint import CheckpointPolicy

    backward = _tangent_closure(joint.graph)
    done = 0
    for sm in [n for n in joint.graph.nodes if n.target is aten._softmax.default]:
        found = _recomputable(sm, backward)
        if not found:
            continue
        tagged, product, softmax_grads = found
        lse, probs = _lse_and_probs(joint.graph, sm)
        sm.replace_all_uses_with(probs[-1])
        joint.graph.erase_node(sm)
        for grad in softmax_grads:
            _rows_from_output(joint.graph, grad, probs[-1], product)
        transposed: list = []
        score_product = next(n for n in tagged if n.target is aten.bmm.default)
        keys_major_gradients(joint.graph, score_product, product,
                             lambda op, *a, **k: _node(joint.graph, op, *a, **k), transposed)
        lse.meta["recompute"] = CheckpointPolicy.MUST_SAVE
        for n in (tagged - {sm}) | set(probs) | set(transposed):
            n.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
        done += 1
    if done:
        joint.graph.lint()
        joint.recompile()
    return done


def _tangent_closure(graph: fx.Graph) -> set:
    """The nodes that depend on an incoming gradient: the backward's own."""
    seen: set = set()
    stack = [n for n in graph.nodes if n.op == "placeholder" and n.name.startswith("tangents")]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(n.users)
    return seen


def _recomputable(sm: fx.Node, backward: set):
    """(the ops from q·kᵀ to P and what passes P on, the forward's product P·v, the backward's
    `_softmax_backward_data` ops reading P) for a softmax over the last dim whose output the forward
    reads only through one product with v and the backward reads; None otherwise."""
    scores, dim, half_to_float = sm.args[:3]
    val = scores.meta.get("val")
    if half_to_float or val is None or dim not in (-1, val.dim() - 1) or sm in backward:
        return None
    members, stack, backward_reads, forward_products, grads = {sm}, [sm], 0, [], []
    while stack:
        n = stack.pop()
        for u in n.users:
            if u.op == "output":  # returned (attention weights): the forward writes P anyway
                return None
            if u in backward:
                backward_reads += 1
                if u.target is aten._softmax_backward_data.default and u.args[1] is n:
                    grads.append(u)
            elif u.op == "call_function" and u.target in _PASS_ON:
                if u not in members:
                    members.add(u)
                    stack.append(u)
            elif u.target is aten.bmm.default and u.args[0] is n and u.args[1] not in members:
                forward_products.append(u)
            else:
                return None
    if len(forward_products) != 1 or not backward_reads:
        return None
    chain = _score_chain(scores, backward)
    return None if chain is None else (chain | members, forward_products[0], grads)


def _score_chain(scores: fx.Node, backward: set):
    """The ops on the paths from S's q·kᵀ product to S: S's ancestors through `_SCORE_OPS` as far
    as a batched product, which must be one; None otherwise (or if any depends on a gradient)."""
    reached, products, stack = set(), set(), [scores]
    while stack:
        n = stack.pop()
        if n in reached or n.op != "call_function" or n.target not in _SCORE_OPS:
            continue
        reached.add(n)
        if n.target is aten.bmm.default:
            products.add(n)
        else:
            stack.extend(n.all_input_nodes)
    if len(products) != 1:
        return None
    (product,) = products
    chain = {n for n in reached if _reaches(product, n, reached)}
    return None if any(n in backward for n in chain) else chain


def _reaches(src: fx.Node, dst: fx.Node, within: set) -> bool:
    stack, seen = [dst], set()
    while stack:
        n = stack.pop()
        if n is src:
            return True
        if n not in seen and n in within:
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return False


def _lse_and_probs(graph: fx.Graph, sm: fx.Node):
    """lse = logsumexp(S) over the last dim, 0 for a row of only -inf (the form the flash kernel
    returns: capture/fused_attention.py), float32 for 16-bit scores as ATen's softmax accumulates;
    and [the ops of] P = exp(S - lse) in S's type, the softmax where a row has a finite score."""
    scores = sm.args[0]
    dtype = scores.meta["val"].dtype
    made: list = []

    def add(op, *args, **kwargs):
        made.append(_node(graph, op, *args, **kwargs))
        return made[-1]

    with graph.inserting_before(sm):
        wide = scores if dtype in (torch.float32, torch.float64) else \
            add(aten._to_copy.default, scores, dtype=torch.float32)
        raw = add(aten.logsumexp.default, wide, [-1])
        lse = add(aten.masked_fill.Scalar, raw, add(aten.eq.Scalar, raw, float("-inf")), 0.0)
        first = len(made)
        p = add(aten.exp.default, add(aten.sub.Tensor, wide, add(aten.unsqueeze.default, lse, -1)))
        if dtype != p.meta["val"].dtype:
            p = add(aten._to_copy.default, p, dtype=dtype)
    probs = ([wide] if wide is not scores else []) + made[first:]
    return lse, probs


def _node(graph: fx.Graph, op, *args, **kwargs) -> fx.Node:
    """A new node at the graph's insertion point, with its value's metadata (the partitioner
    reads sizes from it)."""
    node = graph.call_function(op, args, kwargs)
    vals = fx.node.map_aggregate(args, lambda a: a.meta["val"] if isinstance(a, fx.Node) else a)
    with _fake_mode(next(a for a in args if isinstance(a, fx.Node))):
        node.meta["val"] = op(*vals, **kwargs)
    return node


def _fake_mode(node: fx.Node):
    import contextlib

    from torch._guards import detect_fake_mode

    mode = detect_fake_mode([node.meta["val"]])
    return mode if mode is not None else contextlib.nullcontext()


def _rows_from_output(graph: fx.Graph, node: fx.Node, probs: fx.Node, product: fx.Node) -> None:
    """`_softmax_backward_data(dP, P)` = P (dP - rowsum(dP P)) with the row sums taken as
    rowsum(dO O) instead, O = P·v the forward's product and dO its gradient (FlashAttention's
    backward): equal, since dP = dO vᵀ, and read from T x d tensors where dP P is T x T. Only where
    dP is that product of dO with v's transpose, in P's own type (P itself or a view of it)."""
    grad, _, dim, dtype = node.args
    val = grad.meta.get("val")
    if val is None or dim not in (-1, val.dim() - 1) or dtype != probs.meta["val"].dtype or val.dtype != dtype:
        return
    d_out = _gradient_of_output(grad, product)
    if d_out is None:
        return
    wide = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    with graph.inserting_before(node):
        o, g = product, d_out
        if o.meta["val"].dtype != wide:
            o, g = (_node(graph, aten._to_copy.default, t, dtype=wide) for t in (o, g))
        rows = _node(graph, aten.sum.dim_IntList, _node(graph, aten.mul.Tensor, g, o), [-1], True)
        # a symbolic size is read from dP: a SymInt itself in the graph is a name no code defines
        shape = [_node(graph, aten.sym_size.int, grad, d) if isinstance(s, torch.SymInt) else s
                 for d, s in enumerate(val.shape[:-1])]
        rows = _node(graph, aten.reshape.default, rows, shape + [1])
        if wide != dtype:
            rows = _node(graph, aten._to_copy.default, rows, dtype=dtype)
        out = _node(graph, aten.mul.Tensor, node.args[1], _node(graph, aten.sub.Tensor, grad, rows))
    node.replace_all_uses_with(out)
    graph.erase_node(node)


def _widens(node: fx.Node) -> bool:
    """A conversion to a float type at least as wide (16-bit dP to a float32 softmax's type)."""
    src, dst = node.args[0].meta["val"].dtype, node.meta["val"].dtype
    return src.is_floating_point and dst.is_floating_point and dst.itemsize >= src.itemsize


def _gradient_of_output(grad: fx.Node, product: fx.Node):
    """dO where `grad` is (a view or widening of) bmm(dO, w) with w a view of v's transpose (v the second
    factor of the forward's `product`) and dO shaped as the product's output; else None."""
    views = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)
    widening = (aten._to_copy.default, torch.ops.prims.convert_element_type.default)
    while grad.op == "call_function" and (grad.target in views or grad.target in widening and _widens(grad)):
        grad = grad.args[0]
    if grad.target is not aten.bmm.default:
        return None
    d_out, w = grad.args
    if (not swaps_matrix_dims(w)
            or w.args[0] is not product.args[1]):
        return None
    return d_out if d_out.meta["val"].shape == product.meta["val"].shape else None
