"""Which ATen ops capture decomposes before import.

torch-mlir's own table is the starting point: core ATen decompositions plus the overloads its
lowering needs (eval-mode batch norm's `_native_batch_norm_legit_no_training`, whose saved
statistics are zero-sized and break the direct lowering, among them).
"""
from __future__ import annotations

import functools

from torch_mlir.extras.fx_decomp_util import get_decomposition_table


@functools.cache
def decomposition_table() -> dict:
    return dict(get_decomposition_table())
