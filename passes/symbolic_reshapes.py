"""Reshapes of symbolic sizes that undo one another, removed (part of `uniorch-preprocess`).

torch-mlir lowers a view that splits a symbolic dim (SDPA's `[b * h, t, t] -> [b, h, t, t]` after
its batched matmul) as `tensor.reshape` to a shape built from elements, and merging views as
`tensor.collapse_shape`. With static sizes upstream canonicalisation folds such a pair; with
symbolic ones it cannot prove the sizes agree. uniorch/ir/dims.py can: a `tensor.reshape` or
`expand_shape` whose result has the dims of the tensor a chain of reshapes started from is that
tensor, so the batched matmul's 4-d result reaches the softmax directly and attention fuses.
"""
from __future__ import annotations

from torch_mlir import ir

from uniorch.ir import dims

RESHAPES = ("tensor.reshape", "tensor.expand_shape", "tensor.collapse_shape")


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(dims.is_static(x) == dims.is_static(y) and (x == y if dims.is_static(x)
                                                                                    else dims.prod([x]) == dims.prod([y]))
                                    for x, y in zip(a, b))


def fold_symbolic_reshapes(func_op: ir.Operation) -> int:
    """Replaces each reshape that restores an earlier tensor's dims by that tensor; returns how many."""
    if not dims.has_symbols(func_op):
        return 0
    done = 0
    for op in [o.operation for o in func_op.regions[0].blocks[0].operations]:
        if op.name not in ("tensor.reshape", "tensor.expand_shape") or not list(op.results[0].uses):
            continue
        try:
            want = dims.shape(op.results[0])
        except dims.UnknownSize:
            continue
        src = op.operands[0]
        while not isinstance(src.owner, ir.Block) and src.owner.name in RESHAPES:
            src = src.owner.operands[0]
            try:
                have = dims.shape(src)
            except dims.UnknownSize:
                break
            if src.type == op.results[0].type and _same(have, want):
                op.results[0].replace_all_uses_with(src)
                _erase_unused(op)
                done += 1
                break
    return done


def _erase_unused(op) -> None:
    """The reshape and the chain of reshapes (and their size operands' producers) it read, once unused."""
    while op is not None and op.name in RESHAPES + ("tensor.from_elements",) and not any(
            list(r.uses) for r in op.results):
        feeds = [v.owner for v in op.operands if not isinstance(v.owner, ir.Block)]
        op.erase()
        op = next((f.operation for f in feeds if f.name in RESHAPES or f.name == "tensor.from_elements"), None)
