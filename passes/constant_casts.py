"""Float casts of constants folded into constants of the cast's type.

Why: `torch.arange(0, 1, 0.1)` imports its step as a float64 constant truncated to float32 in
@main (`arith.truncf`); MLIR does not fold a truncation that loses bits, so the kernel reading the
step took it as a scalar f32 argument, which codegen does not pass, and the op ran in PyTorch.
`FloatAttr.get` rounds to the nearest value, ties to even, as `truncf` does at run time.
"""
from __future__ import annotations

from torch_mlir import ir

from uniorch.codegen import patterns as pat

_CASTS = ("arith.truncf", "arith.extf")


def fold_constant_casts(func_op: ir.Operation) -> int:
    """Folds @main's top-level float casts of float constants; the number folded."""
    folded = 0
    for op in [o.operation for o in func_op.regions[0].blocks[0].operations]:
        if op.name not in _CASTS or len(op.operands) != 1 or isinstance(op.operands[0].owner, ir.Block):
            continue
        src = pat.op_of(op.operands[0].owner)
        if src.name != "arith.constant" or not isinstance(src.attributes["value"], ir.FloatAttr):
            continue
        ty = op.results[0].type
        with ir.InsertionPoint(op), op.location:
            c = ir.Operation.create("arith.constant", results=[ty], attributes={
                "value": ir.FloatAttr.get(ty, ir.FloatAttr(src.attributes["value"]).value)})
        op.results[0].replace_all_uses_with(c.results[0])
        op.erase()
        folded += 1
    return folded
