"""`cmpf(extf(x), c)` → `cmpf(x, c')` inside linalg bodies, when `c` is exact in x's type; part
of `uniorch-preprocess`.

Why: torch-mlir compares a tensor with a Python float (`aten.eq.Scalar`, `lt.Scalar`, ...) by
widening the tensor to f64, the scalar's type. SDPA's safe softmax tests `scores == -inf` that
way, so fp32 and bf16 attention kernels did f64 arithmetic (slow on GPUs, absent on some
accelerators). Widening is exact and the constant is representable in the narrow type, so both
comparisons give the same answer for every input, NaN included.
"""
from __future__ import annotations

import struct

from torch_mlir import ir

from uniorch.codegen import patterns as pat

_NARROW = {"f32": "f", "f16": "e"}  # struct formats that round-trip a Python float exactly or not


def narrow_compares(func_op: ir.Operation) -> None:
    block = func_op.regions[0].blocks[0]
    for op in [o.operation for o in block.operations]:
        if pat.is_generic(op):
            _narrow_body(op.regions[0].blocks[0])


def _narrow_body(body: ir.Block) -> None:
    for op in [o.operation for o in body.operations]:
        if op.name != "arith.cmpf":
            continue
        a, b = op.operands
        wide, const = (a, b) if _const(b) is not None else (b, a)
        value = _const(const)
        ext = None if isinstance(wide.owner, ir.Block) else pat.op_of(wide.owner)
        if value is None or ext is None or ext.name != "arith.extf":
            continue
        src = ext.operands[0]
        small = str(src.type)
        if small not in _NARROW or not _exact(value, small):
            continue
        with ir.InsertionPoint(op), op.location:
            c = ir.Operation.create("arith.constant", results=[src.type],
                                    attributes={"value": ir.FloatAttr.get(src.type, value)})
            ordered = [src, c.result] if wide == a else [c.result, src]
            new = ir.Operation.create("arith.cmpf", results=[op.results[0].type], operands=ordered,
                                      attributes={"predicate": op.attributes["predicate"]})
        op.results[0].replace_all_uses_with(new.results[0])
        op.erase()
        if not list(ext.results[0].uses):
            ext.erase()


def _const(v: ir.Value):
    if isinstance(v.owner, ir.Block):
        return None
    p = pat.op_of(v.owner)
    if p.name != "arith.constant" or not isinstance(p.attributes["value"], ir.FloatAttr):
        return None
    return ir.FloatAttr(p.attributes["value"]).value


def _exact(value: float, ty: str) -> bool:
    if value != value:
        return True  # NaN compares unequal to everything in every type
    try:
        return struct.unpack(_NARROW[ty], struct.pack(_NARROW[ty], value))[0] == value
    except OverflowError:
        return False
