"""Constant folding for the contraction emitter: an op whose operands are all compile-time
constants becomes a Python literal in the kernel (a mask's `0 - 1`, a widened scale), rounded to
its MLIR type as the op would round it; and which ops may keep Python literals as operands."""
from __future__ import annotations

import math

import numpy as np

from .contraction_ir import _NP, _Val, _is_float, _round

_CASTS = ("arith.extf", "arith.truncf", "arith.sitofp", "arith.fptosi", "arith.extsi", "arith.trunci",
          "arith.index_cast")
_LITERAL_OK = {
    "arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.addi", "arith.subi", "arith.muli",
    "arith.andi", "arith.ori", "arith.xori", "arith.select", "arith.cmpf", "arith.cmpi",
    "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf", "arith.maxsi", "arith.minsi",
}


def _fold(name: str, d, ins: list[_Val], ty: str):
    """Compile-time value of an op on constants, or None."""
    if not ins or any(v.const is None for v in ins):
        return None
    c = [v.const for v in ins]
    with np.errstate(all="ignore"):
        if name in ("arith.extf", "arith.truncf", "arith.sitofp", "arith.extsi", "arith.trunci",
                    "arith.index_cast", "arith.fptosi"):
            v = c[0]
            if ins[0].ty == "i1" and name in ("arith.sitofp", "arith.extsi"):
                v = -1 if v else 0  # signed i1: true is -1
            if name == "arith.fptosi":
                if not math.isfinite(v):
                    return None
                v = math.trunc(v)
            return _round(v, ty)
        if _is_float(ty) and ty != "bf16":
            f = _NP[ty]
            x = [f(v) for v in c]
            ops = {"arith.addf": lambda: x[0] + x[1], "arith.subf": lambda: x[0] - x[1],
                   "arith.mulf": lambda: x[0] * x[1], "arith.divf": lambda: x[0] / x[1],
                   "arith.negf": lambda: -x[0]}
            if name in ops:
                return float(f(ops[name]()))
    return None


__all__ = ["_CASTS", "_LITERAL_OK", "_fold"]
