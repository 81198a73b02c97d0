"""Integer powers (`x ** 2` of an int tensor, `torch.pow(a, b)` of ints, `2 ** t`) as products.

Why: torch-mlir has no lowering of `aten.pow` on integer tensors ("lowering torch to linalg
failed"), so each ran in PyTorch. These are ATen's own `powi`: squaring and multiplying per bit of
the exponent, wrapping as the kernels' integer arithmetic does, and for a negative exponent 1 for a
base of 1, ±1 for -1 and 0 otherwise. A Python exponent is unrolled at capture (`x ** 3` is two
products); a negative one raises eager's error.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

_BITS = {torch.int8: 7, torch.int16: 15, torch.int32: 31, torch.int64: 63, torch.uint8: 8}


def _integral(dtype) -> bool:
    return dtype in _BITS


def _pow_scalar_exponent(x, exponent):
    """x ** n for an int tensor and a Python int n: squaring by n's bits, unrolled."""
    if not isinstance(exponent, int) or isinstance(exponent, bool) or not _integral(x.dtype):
        return NotImplemented
    if exponent < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    result, base, n = None, x, exponent
    while n:
        if n & 1:
            result = base if result is None else result * base
        n >>= 1
        if n:
            base = base * base
    # torch.ones, not ones_like: torch-mlir lowers no full_like of uint8
    return torch.ones(x.shape, dtype=x.dtype, device=x.device) if result is None else result.clone()


def _pow_tensors(base, exponent):
    """ATen's powi elementwise, both operands int tensors of one dtype (or a Python int base)."""
    if isinstance(base, torch.Tensor) and isinstance(exponent, torch.Tensor):
        dtype = torch.result_type(base, exponent)
    elif isinstance(exponent, torch.Tensor) and isinstance(base, int) and not isinstance(base, bool):
        dtype = torch.result_type(base, exponent)
        base = torch.full((), base, dtype=dtype, device=exponent.device)
    else:
        return NotImplemented
    if not _integral(dtype):
        return NotImplemented
    base, exponent = base.to(dtype), exponent.to(dtype)
    shape = torch.broadcast_shapes(base.shape, exponent.shape)
    result = torch.ones(shape, dtype=dtype, device=exponent.device)
    b, e = base, exponent.clamp_min(0) if dtype.is_signed else exponent
    for _ in range(_BITS[dtype]):
        half = torch.div(e, 2, rounding_mode="trunc")
        result = torch.where(e != half * 2, result * b, result)
        b, e = b * b, half
    if dtype.is_signed:
        odd = exponent != torch.div(exponent, 2, rounding_mode="trunc") * 2
        one = torch.ones((), dtype=dtype, device=exponent.device)
        negative = torch.where(base == 1, one, torch.where(base == -1, torch.where(odd, -one, one), 0 * one))
        result = torch.where(exponent < 0, negative, result)
    return result


TABLE = {
    aten.pow.Tensor_Scalar: _pow_scalar_exponent,
    aten.pow.Tensor_Tensor: _pow_tensors,
    aten.pow.Scalar: _pow_tensors,
}
