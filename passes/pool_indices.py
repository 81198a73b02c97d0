"""Max-pool indices with PyTorch's NaN rule, part of `uniorch-preprocess`.

torch-mlir computes max_pool{1,2,3}d's indices as a second pass over each window: the first
position whose value `arith.cmpf oeq` the pooled max. When the window holds a NaN the max is NaN,
nothing compares equal, and the index stays -1. ATen's kernels update on `val > max || isnan(val)`,
so they return the window's *last* NaN. The rewrite keeps torch-mlir's rule for ordinary maxima
and, when the max is NaN, takes the position of every NaN seen (codegen evaluates such bodies in
window order, so the last one wins).
"""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith

from uniorch.codegen import patterns as pat

_OEQ, _UNO = 1, 14  # arith::CmpFPredicate


def fix_pool_nan_indices(func_op: ir.Operation) -> int:
    """Rewrites every matching index generic in `func_op`; returns how many."""
    fixed = 0
    block = func_op.regions[0].blocks[0]
    for op in [o.operation for o in block.operations]:
        if pat.is_generic(op) and _rewrite(op):
            fixed += 1
    return fixed


def _def(v: ir.Value):
    return None if isinstance(v.owner, ir.Block) else v.owner


def _is_arg(v: ir.Value, block: ir.Block, i: int) -> bool:
    return isinstance(v.owner, ir.Block) and v.owner == block and ir.BlockArgument(v).arg_number == i


def _predicate(op) -> int:
    return ir.IntegerAttr(op.attributes["predicate"]).value


def _rewrite(generic: ir.Operation) -> bool:
    body = generic.regions[0].blocks[0]
    args = list(body.arguments)
    if len(args) < 2 or str(args[0].type) not in ("f16", "bf16", "f32", "f64"):
        return False
    out = len(args) - 1
    ops = [o.operation for o in body.operations]
    yld = ops[-1]
    if len(yld.operands) != 1:
        return False
    # yield select(cmpi eq(out, -1), select(cmpf oeq(x, max), idx, out), out)
    first = _def(yld.operands[0])
    if first is None or first.name != "arith.select" or not _is_arg(first.operands[2], body, out):
        return False
    unset = _def(first.operands[0])
    if unset is None or unset.name != "arith.cmpi" or not _is_arg(unset.operands[0], body, out):
        return False
    pick = _def(first.operands[1])
    if pick is None or pick.name != "arith.select" or not _is_arg(pick.operands[2], body, out):
        return False
    equal = _def(pick.operands[0])
    if equal is None or equal.name != "arith.cmpf" or _predicate(equal) != _OEQ:
        return False
    a, b = equal.operands
    value = b if _is_arg(a, body, 0) else a if _is_arg(b, body, 0) else None
    if value is None:
        return False
    pooled = args[0]
    with ir.InsertionPoint(yld), yld.location:
        max_is_nan = arith.CmpFOp(ir.IntegerAttr.get(ir.IntegerType.get_signless(64), _UNO), pooled, pooled).result
        here_is_nan = arith.CmpFOp(ir.IntegerAttr.get(ir.IntegerType.get_signless(64), _UNO), value, value).result
        last_nan = arith.SelectOp(here_is_nan, pick.operands[1], args[out]).result
        result = arith.SelectOp(max_is_nan, last_nan, first.result).result
    yld.operands[0] = result
    return True
