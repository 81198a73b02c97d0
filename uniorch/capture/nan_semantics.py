"""Decompositions that keep PyTorch's NaN semantics where torch-mlir's lowering drops them.

torch-mlir lowers `aten.maximum` / `aten.minimum` on floats to `arith.cmpf ogt|olt` + `select`,
which returns the second operand when the first is NaN; PyTorch returns NaN if either operand is
NaN. Rewriting them before import as a select that tests for NaN explicitly keeps the answer right
and still fuses as one pointwise op.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _maximum(a, b):
    if not (a.dtype.is_floating_point or b.dtype.is_floating_point):
        return NotImplemented
    return torch.where((a > b) | torch.isnan(a), a, b)


def _minimum(a, b):
    if not (a.dtype.is_floating_point or b.dtype.is_floating_point):
        return NotImplemented
    return torch.where((a < b) | torch.isnan(a), a, b)


TABLE = {aten.maximum.default: _maximum, aten.minimum.default: _minimum}
