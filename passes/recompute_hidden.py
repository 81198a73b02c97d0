"""Recomputing a contraction's wide result per reader, so each reader can chain it (uniorch-fuse-chain).

A chain keeps its hidden activation in registers only when the contraction that reads it is its
one reader. An attention backward breaks that: P = exp(S - lse), S = q·kᵀ (batch x T x T), is read
by dV's product and by the epilogue computing dS, which dK's product reads. Writing and reading
those T x T tensors is what a FlashAttention backward avoids by computing S again in each kernel
that needs it. Here that is a group (one contraction, its prologue and a pointwise epilogue) whose
results leave it only for contractions, and whose product is cheap to compute again: its result
is far larger than its operands (a reduction over a head dim, not over a model width). For one
such reader the ops computing the value it reads are cloned into a group of their own, which then
chains like any other; the original group keeps what its other readers read.
"""
from __future__ import annotations

from math import prod

from torch_mlir import ir

from uniorch.codegen import patterns as pat

from .fuse_common import GROUP, _widens
from .groups import _i64, top_level

# the product's reduction (the head dim) is at most this; over a model's width the product costs
# more than storing its result does
MAX_REDUCTION = 256
# recompute only where the result is at least this many times its operands (attention: T / 2d); the
# reduction bound above is what keeps the recomputed FLOPs cheaper than the bytes they save
MIN_WIDENING = 1


def recomputes_scores(rows, cols, depth) -> bool:
    """Whether a product of `rows` x `depth` by `depth` x `cols` (attention's scores: queries, keys,
    head dim) passes the size tests below, so that each of its product readers chains its own
    copy. Capture and the training rewrite build an attention backward in the form that needs
    this only where it holds (runtime/attention_transpose.py)."""
    if not all(isinstance(x, int) for x in (rows, cols, depth)):
        return True
    return depth <= MAX_REDUCTION and rows * cols >= MIN_WIDENING * (rows + cols) * depth


def worth_recomputing(a_ops, c1, value) -> bool:
    """The group computes `value` from one product whose result is much larger than its operands,
    and everything it hands out is read by contractions alone."""
    sizes, iters = pat.loop_sizes(c1), pat.iterator_types(c1)
    red = [s for s, it in zip(sizes, iters) if it == "reduction"]
    if not red or not all(isinstance(s, int) for s in sizes) or prod(red) > MAX_REDUCTION:
        return False
    operands = sum(prod(ir.RankedTensorType(v.type).shape) for v in c1.opview.inputs)
    shape = ir.RankedTensorType(value.type).shape
    if any(ir.ShapedType.is_dynamic_size(s) for s in shape) or prod(shape) < MIN_WIDENING * operands:
        return False
    inside = [pat.op_of(o) for o in a_ops]
    for o in a_ops:
        for r in o.results:
            for u in r.uses:
                top = top_level(pat.op_of(u.owner))
                if not any(top == i for i in inside) and not _read_by_products(top):
                    return False
    return True


def _read_by_products(op) -> bool:
    """A contraction, or a widening (16-bit dS read in float32) that only contractions read."""
    if pat.is_contraction(op):
        return True
    return _widens(op) and all(pat.is_contraction(top_level(pat.op_of(u.owner))) for r in op.results for u in r.uses)


def clone_for_reader(block, a_ops, value, reader):
    """Clones the ops of `a_ops` that `value` depends on into a new group, just before each
    original; `reader` reads the clone's value. Returns that value, or None where an op's region
    reads a value of the slice (nothing is cloned then)."""
    ops = [pat.op_of(o) for o in a_ops]

    def index(v):
        """The position in `ops` of v's defining op, or None."""
        if isinstance(v.owner, ir.Block):
            return None
        owner = pat.op_of(v.owner)
        return next((i for i, o in enumerate(ops) if o == owner), None)

    needed, stack = set(), [index(value)]
    while stack:
        i = stack.pop()
        if i is None or i in needed:
            continue
        needed.add(i)
        stack.extend(index(v) for v in ops[i].operands)
    if any(index(v) in needed for i in needed for v in pat.captured_values(ops[i])):
        return None
    gid = 1 + max(ir.IntegerAttr(o.operation.attributes[GROUP]).value
                  for o in block.operations if GROUP in o.operation.attributes)
    clones: dict[int, ir.Operation] = {}
    for i in sorted(needed):
        with ir.InsertionPoint(ops[i]):
            y = pat.op_of(ops[i].clone())
        for n, v in enumerate(ops[i].operands):
            j = index(v)
            if j in clones:
                y.operands[n] = clones[j].results[ir.OpResult(v).result_number]
        y.attributes[GROUP] = _i64(gid)
        clones[i] = y
    new = clones[index(value)].results[ir.OpResult(value).result_number]
    reader = pat.op_of(reader)
    for i, v in enumerate(reader.operands):
        if v == value:
            reader.operands[i] = new
    return new


__all__ = ["recomputes_scores", "worth_recomputing", "clone_for_reader"]
