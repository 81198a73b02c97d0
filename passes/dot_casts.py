"""A 16-bit matmul reads its 16-bit factors, part of `uniorch-preprocess`.

torch-mlir lowers a bf16 `mm`/`linear`/convolution as a float32 contraction over float32 widenings of
its factors (each widening a generic of its own: torch computes in float32 and rounds once). Fused
as operand producers, those widenings reach the tile loop as float32 tiles, and a float32 `tl.dot`
runs on the FMA units, an order of magnitude below the tensor cores (the first H200 run: a bf16 MLP
at 6.6 TFLOP/s). Moving each widening into the contraction's body, on the element read, gives the
contraction its 16-bit factors; the code generator then feeds them to `tl.dot` as they are, with a
float32 accumulator. The result is the same: the widening is exact, and a product of two 16-bit
floats is exact in float32 (what cuBLAS does for eager bf16 matmuls).
"""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith

from uniorch.codegen import patterns as pat

from .gather_casts import _widening

_NARROW = ("bf16", "f16")


def widen_inside_contractions(func_op: ir.Operation) -> int:
    """Rewrites each contraction or convolution factor that is a 16-bit tensor widened to float32
    by a generic of its own; returns how many factors now read 16 bits."""
    done = 0
    block = func_op.regions[0].blocks[0]
    for op in [o.operation for o in block.operations]:
        if op.name != "linalg.generic" or not (pat.is_contraction(op) or pat.is_convolution(op)):
            continue
        body = pat.body(op)
        for i, v in enumerate(pat.inputs(op)):
            found = _widening(v)
            if found is None:
                continue
            src, cast = found
            if cast.name != "arith.extf" or str(ir.RankedTensorType(src.type).element_type) not in _NARROW:
                continue
            arg = body.arguments[i]
            wide = arg.type
            op.operands[i] = src
            arg.set_type(ir.RankedTensorType(src.type).element_type)
            with ir.InsertionPoint.at_block_begin(body), cast.location:
                ext = arith.ExtFOp(wide, arg).result
            arg.replace_all_uses_except(ext, pat.op_of(ext.owner))
            done += 1
    if done:
        for op in reversed([o.operation for o in block.operations]):
            if op.name == "linalg.generic" and not any(True for _ in op.results[0].uses) \
                    and _is_widening(op):
                op.erase()
    return done


def _is_widening(op: ir.Operation) -> bool:
    from .gather_casts import _widening_generic

    return _widening_generic(op) is not None
