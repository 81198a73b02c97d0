"""Each reader of an index tensor (`arange`, a generic computing from `linalg.index` only) gets
its own copy, part of `uniorch-preprocess`.

Such a tensor costs nothing to recompute and reads no memory, but fusion is greedy: the first
kernel to take it computes it, and every later reader loads it from memory, which makes the
first kernel write it (a causal mask built from `arange` read back by the kernel applying it).
Copied per reader, each joins its reader's kernel as a producer of its own.
"""
from __future__ import annotations

from torch_mlir import ir

from uniorch.codegen import patterns as pat


def clone_iotas(func_op: ir.Operation) -> None:
    block = func_op.regions[0].blocks[0]
    for op in [o.operation for o in block.operations]:
        if not _is_iota(op):
            continue
        uses = [(pat.op_of(u.owner), u.operand_number) for u in op.results[0].uses]
        for owner, i in uses[1:]:
            with ir.InsertionPoint(op), op.location:
                copy = pat.op_of(op.clone())
            owner.operands[i] = copy.results[0]


def _is_iota(op) -> bool:
    """A generic with one result and no tensor input whose body reads its indices."""
    if not pat.is_generic(op) or len(op.results) != 1 or not pat.is_fill(op):
        return False
    return any(o.name == "linalg.index" for o in pat.body_ops(op))
