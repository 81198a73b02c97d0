"""Kernel code generation: one outlined kernel function (docs/kernels.md) → Triton source → TTIR.

`choose_schedule` and `generate` dispatch on the kernel's `uniorch.kind`: contractions use the
tiled-`tl.dot` template (contraction.py), everything else the generic loop-nest emitter
(generic.py).
"""
from __future__ import annotations

from .source import CodegenError, KernelSource

__all__ = ["CodegenError", "KernelSource", "choose_schedule", "generate"]


def _kind(kernel) -> str:
    from torch_mlir import ir

    attr = kernel.attributes["uniorch.kind"] if "uniorch.kind" in kernel.attributes else None
    return ir.StringAttr(attr).value if attr is not None else "pointwise"


def _module_for(kernel):
    if _kind(kernel) == "contraction":
        from . import contraction

        return contraction, "contraction"
    from . import generic

    return generic, "generic"


def choose_schedule(kernel, target: str) -> dict:
    mod, which = _module_for(kernel)
    return getattr(mod, "choose_schedule")(kernel, target)


def generate(kernel, target: str) -> KernelSource:
    mod, which = _module_for(kernel)
    return getattr(mod, f"generate_{which}")(kernel, target)
