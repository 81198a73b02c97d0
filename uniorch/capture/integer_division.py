"""Integer floor division (`a // b`, `torch.div(..., rounding_mode="floor")`, `floor_divide`) in
integer arithmetic.

Why: torch-mlir lowers it through float64 (`fptosi(floor(sitofp(a) / sitofp(b)))`), which is
wrong once |a| or |b| passes 2^53: `(2**53 + 1) // 3` came out one less than eager's. Truncating
division and its remainder are exact integer ops (`arith.divsi`, `arith.remsi`); the floor is the
truncated quotient less one where the remainder is non-zero and its sign differs from the
divisor's. A zero divisor runs the call eagerly, which raises eager's error. Floats keep
torch-mlir's lowering.
"""
from __future__ import annotations

import torch

from .checks import require

aten = torch.ops.aten


def _integral(*xs) -> bool:
    return all(not (x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool)
               for x in xs if isinstance(x, torch.Tensor))


def _floor_divide(a, b):
    if not isinstance(a, torch.Tensor) or not _integral(a, b) or isinstance(b, float):
        return NotImplemented
    # eager raises ZeroDivisionError; a compiled integer division by zero is undefined: the call
    # then runs eagerly (checks.require), which raises it
    if isinstance(b, torch.Tensor) or b == 0:  # a non-zero Python divisor needs no check
        zero = (b == 0) if isinstance(b, torch.Tensor) else torch.ones((), dtype=torch.bool, device=a.device)
        require(~zero, "integer division: no zero divisor (eager raises ZeroDivisionError)")
    q = torch.div(a, b, rounding_mode="trunc")
    r = a - q * b  # the truncated remainder (torch-mlir lowers no integer fmod by a Python int)
    return q - ((r != 0) & ((r < 0) != (b < 0))).to(q.dtype)


def _div_mode(a, b, *, rounding_mode=None):
    if rounding_mode != "floor":
        return NotImplemented
    return _floor_divide(a, b)


TABLE = {
    aten.floor_divide.default: _floor_divide,
    aten.floor_divide.Scalar: _floor_divide,
    aten.div.Tensor_mode: _div_mode,
    aten.div.Scalar_mode: _div_mode,
}
