"""Written-out attention in training: the backward recomputes the attention probabilities where
eager autograd saves them.

`softmax(q @ kᵀ * s + mask) @ v` (nanoGPT's attention without flash, transformers' "eager"
attention) records `_softmax` in the joint graph, and both `_softmax_backward_data` and the
gradient of `v` read its output P. So the min-cut partitioner saves P, batch x heads x T x T, and
the forward must write it: at GPT-2's sizes (8 x 12 x 1024²) that is 400 MB per layer, and the
forward cannot be one flash-attention kernel (uniorch-fuse-attention stores no T x T tensor).

This rewrite, run on the joint graph before partitioning, tags the ops from the q·kᵀ product to P
MUST_RECOMPUTE (activation checkpointing's tags, which the partitioner honours): the forward saves
q and k (and the mask's inputs), never a T x T tensor, and is one flash kernel; the backward
computes the scores and their softmax again from them, T x T tiles as SDPA's backward on a CPU.

Left as it is: dropout on P (its mask would be saved all the same), P read by the forward other
than by the product with v (returned attention weights), scores from anything but one batched
product through pointwise ops.
"""
from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten

# ops that pass P's values on unchanged (or converted): the backward gets its own copy of each
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
    """Tags each written-out attention of the joint graph as above; returns how many."""
    from torch.utils.checkpoint import CheckpointPolicy

    backward = _tangent_closure(joint.graph)
    done = 0
    for sm in [n for n in joint.graph.nodes if n.target is aten._softmax.default]:
        tagged = _recomputable(sm, backward)
        for n in tagged or ():
            n.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
        done += bool(tagged)
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
    """The ops from q·kᵀ to P and what passes P on, for a softmax over the last dim whose output
    the forward reads only through one product with v and the backward reads; None otherwise."""
    scores, dim, half_to_float = sm.args[:3]
    val = scores.meta.get("val")
    if half_to_float or val is None or dim not in (-1, val.dim() - 1) or sm in backward:
        return None
    members, stack, backward_reads, forward_products = {sm}, [sm], 0, 0
    while stack:
        n = stack.pop()
        for u in n.users:
            if u.op == "output":  # returned (attention weights): the forward writes P anyway
                return None
            if u in backward:
                backward_reads += 1
            elif u.op == "call_function" and u.target in _PASS_ON:
                if u not in members:
                    members.add(u)
                    stack.append(u)
            elif u.target is aten.bmm.default and u.args[0] is n and u.args[1] not in members:
                forward_products += 1
            else:
                return None
    if forward_products != 1 or not backward_reads:
        return None
    chain = _score_chain(scores, backward)
    return None if chain is None else chain | members


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
