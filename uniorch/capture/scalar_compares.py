"""Comparisons compare in PyTorch's common dtype, as eager does.

Eager casts both sides of `<`, `<=`, `>`, `>=`, `==`, `!=` to their common dtype (`result_type`)
and compares there: a float32 tensor against the Python float 0.1 compares with float32(0.1), so
`torch.tensor(0.1) == 0.1` is true, and an int32 tensor against 0.5 compares as float32. torch-mlir
widens a float tensor and a float scalar to f64 instead: `x == 0.1` was false for every float32 x,
`denom < 1e-5` true for denom = float32(1e-5) (eager: false), and an f64 op landed in float32
models' kernels. Each comparison involving a float becomes the Tensor form with both operands
already in the common dtype (a Python number as a 0-d tensor of it), which torch-mlir compares in
that dtype.

Also: torch-mlir folds `aten.lt.Scalar` (and le, gt, ge, eq, ne) of a constant float splat against
an integer scalar wrongly (`torch.full((), 1.7) > 1` folded to false: the float32 splat and the
integer were compared as APFloats of different semantics), and crashed on a float64 splat; the
Tensor form of two floats folds right.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

_PAIRS = {aten.lt.Scalar: aten.lt.Tensor, aten.le.Scalar: aten.le.Tensor, aten.gt.Scalar: aten.gt.Tensor,
          aten.ge.Scalar: aten.ge.Tensor, aten.eq.Scalar: aten.eq.Tensor, aten.ne.Scalar: aten.ne.Tensor}


def _in_common_dtype(op):
    def rewrite(x, other):
        if not isinstance(x, torch.Tensor) or x.is_complex() or isinstance(other, complex) \
                or (isinstance(other, torch.Tensor) and other.is_complex()):
            return NotImplemented
        dtype = torch.result_type(x, other)  # a float when either side is one
        if not dtype.is_floating_point:
            return NotImplemented  # integers and bools compare exactly as they are
        if isinstance(other, torch.Tensor):
            if x.dtype == dtype and other.dtype == dtype:
                return NotImplemented
            other = other.to(dtype)
        else:
            other = torch.scalar_tensor(other, dtype=dtype, device=x.device)
        return op(x.to(dtype), other)
    return rewrite


TABLE = {scalar: _in_common_dtype(tensor) for scalar, tensor in _PAIRS.items()}
TABLE.update({tensor: _in_common_dtype(tensor) for tensor in _PAIRS.values()})
