"""MLIR contexts with every dialect uniorch's graphs use (upstream + torch-mlir's own dialects)."""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import torch as torch_d
from torch_mlir.passmanager import PassManager


def make_context() -> ir.Context:
    ctx = ir.Context()
    torch_d.register_dialect(ctx)
    _load_lowering_dialects(ctx)
    return ctx


def _load_lowering_dialects(ctx: ir.Context) -> None:
    """Loads `tm_tensor`, `torch_c` and the rest of what torch-mlir's lowering produces.

    The Python bindings register only the `torch` dialect, yet the linalg stage holds `tm_tensor`
    ops (cumsum → tm_tensor.scan, scatter → tm_tensor.scatter); a printed module must parse back.
    Running the lowering pipeline once on an empty module makes MLIR load every dialect its passes
    declare as dependent (about 10 ms), through the public API only.
    """
    with ctx, ir.Location.unknown():
        empty = ir.Module.create()
        PassManager.parse("builtin.module(torch-backend-to-linalg-on-tensors-backend-pipeline)").run(empty.operation)


def parse_module(text: str, ctx: ir.Context) -> ir.Module:
    """Parses MLIR text (raises ir.MLIRError; its locations name the buffer "-", see diagnostics)."""
    with ctx:
        return ir.Module.parse(text, ctx)
