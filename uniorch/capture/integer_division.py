"""Integer floor division (`a // b`, `torch.div(..., rounding_mode="floor")`, `floor_divide`) in
integer arithmetic.

Why: torch-mlir lowers it through float64 (`fptosi(floor(sitofp(a) / sitofp(b)))`), which is
wrong once |a| or |b| passes 2^53: `(2**53 + 1) // 3` came out one less than eager's. Truncating
division and its remainder are exact integer ops (`arith.divsi`, `arith.remsi`); the floor is the
truncated quotient less one where the remainder is non-zero and its sign differs from the
divisor's. A zero divisor runs the call eagerly, which raises eager's error.

Float floor division is ATen's algorithm too (`_float_floor_divide`): torch-mlir's
`floor(a / b)` is one more than eager's wherever the rounded quotient reaches an integer the exact
one does not (`1.0 // 0.1`); it needs an exact fmod, which torch-mlir's lowering is not either
(`_fmod`).
"""
from __future__ import annotations

import torch

from .checks import require

aten = torch.ops.aten


def _integral(*xs) -> bool:
    return all(not (x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool)
               for x in xs if isinstance(x, torch.Tensor))


def _as_float_tensors(a, b):
    """a and b (a tensor or a Python number) as tensors of their result type."""
    dt = torch.result_type(a, b)
    b = b.to(dt) if isinstance(b, torch.Tensor) else torch.full((), b, dtype=dt, device=a.device)
    return a.to(dt), b


def _float_floor_divide(a, b):
    """ATen's div_floor_floating: the quotient of `a - fmod(a, b)`, which is exact, not the floor
    of the rounded quotient (`1.0 // 0.1` is 9: the float32 quotient rounds up to 10.0). For 16-bit
    types ATen runs the same steps in the 16-bit type (c10::Half/BFloat16 arithmetic rounds each
    one), and so do these ops: bf16 2.984 // 0.9961 is 2, where the floor of the rounded quotient
    gave 3."""
    a, b = _as_float_tensors(a, b)
    mod = torch.fmod(a, b)
    div = (a - mod) / b
    div = torch.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    fl = torch.floor(div)
    fl = torch.where(div - fl > 0.5, fl + 1, fl)
    quotient = a / b
    out = torch.where(div != 0, fl, torch.copysign(torch.zeros_like(fl), quotient))
    return torch.where(b == 0, quotient, out)


def _fmod(a, b):
    """Exact IEEE fmod for floats: torch-mlir's `a - trunc(a / b) * b` rounds the quotient
    (`fmod(1.0, 0.1)` came out 0.0, eager's 0.09999999; `fmod(5, inf)` NaN, eager's 5). On
    non-negative operands `remainder` is the exact `arith.remf` (C fmod) with no sign fix-up, so
    fmod is that of |a| and |b| with a's sign. Integer fmod (which torch-mlir does not lower) is
    the truncated remainder; a zero divisor runs the call eagerly, which raises eager's error."""
    if not isinstance(a, torch.Tensor):
        return NotImplemented
    if _integral(a, b) and not isinstance(b, (float, bool)):
        if isinstance(b, torch.Tensor) or b == 0:
            zero = (b == 0) if isinstance(b, torch.Tensor) else torch.ones((), dtype=torch.bool, device=a.device)
            require(~zero, "integer fmod: no zero divisor (eager raises ZeroDivisionError)")
        dt = torch.result_type(a, b)
        a = a.to(dt)
        return a - torch.div(a, b, rounding_mode="trunc").to(dt) * b
    if not torch.result_type(a, b).is_floating_point:
        return NotImplemented
    a, b = _as_float_tensors(a, b)
    return torch.copysign(torch.remainder(a.abs(), b.abs()), a)


def _floor_divide(a, b):
    if not isinstance(a, torch.Tensor):
        return NotImplemented
    if not _integral(a, b) or isinstance(b, float):
        dt = torch.result_type(a, b)
        if dt in (torch.float16, torch.bfloat16) and not isinstance(b, torch.Tensor):
            # a Python divisor: ATen's kernels take it at opmath precision (1.0 // 0.1 is 9 in
            # fp16 as in fp32), not rounded to the tensor's type
            return _float_floor_divide(a.float(), b).to(dt)
        if dt.is_floating_point:
            return _float_floor_divide(a, b)
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
    aten.fmod.Tensor: _fmod,
    aten.fmod.Scalar: _fmod,
    aten.floor_divide.default: _floor_divide,
    aten.floor_divide.Scalar: _floor_divide,
    aten.div.Tensor_mode: _div_mode,
    aten.div.Scalar_mode: _div_mode,
}
