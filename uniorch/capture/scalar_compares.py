"""A float tensor compared with a Python int is compared with the same value as a float.

Why: torch-mlir folds `aten.lt.Scalar` (and le, gt, ge, eq, ne) of a constant float splat against
an integer scalar wrongly: `torch.full((), 1.7) > 1` folded to false and `torch.full((), 0.1) < 0`
to true (the float32 splat and the integer are compared as APFloats of different semantics), and
for a float64 splat the fold crashed the process. A float scalar folds right, and is what PyTorch
compares with anyway (the int is promoted to the tensor's floating type).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _as_float_scalar(op):
    def rewrite(x, other):
        if not (isinstance(x, torch.Tensor) and x.dtype.is_floating_point and type(other) is int):
            return NotImplemented
        return op(x, float(other))
    return rewrite


TABLE = {op: _as_float_scalar(op) for op in (aten.lt.Scalar, aten.le.Scalar, aten.gt.Scalar, aten.ge.Scalar,
                                              aten.eq.Scalar, aten.ne.Scalar)}
