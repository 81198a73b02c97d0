"""MLIR contexts with every dialect uniorch's graphs use (upstream + torch-mlir's torch dialect)."""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import torch as torch_d


def make_context() -> ir.Context:
    ctx = ir.Context()
    torch_d.register_dialect(ctx)
    return ctx


def parse_module(text: str, ctx: ir.Context) -> ir.Module:
    """Parses MLIR text (raises ir.MLIRError; its locations name the buffer "-", see diagnostics)."""
    with ctx:
        return ir.Module.parse(text, ctx)
