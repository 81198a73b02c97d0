"""Kernel code generation: one outlined kernel function (docs/kernels.md) → Triton source → TTIR.

`choose_schedule` and `generate` dispatch on the kernel's `uniorch.kind`: contractions use the
tiled-`tl.dot` template (contraction.py), attention a flash kernel (attention.py; chained products too), scans `tl.associative_scan` (scan.py), sorts a
bitonic network (sort.py), scatters stores or atomics (scatter.py), everything else the generic
loop-nest emitter (generic.py).
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
    if _kind(kernel) in ("attention", "chain"):  # a chain is flash attention without the softmax
        from . import attention

        return attention, "attention"
    if _kind(kernel) == "scan":
        from . import scan

        return scan, "scan"
    if _kind(kernel) == "sort":
        from . import sort

        return sort, "sort"
    if _kind(kernel) == "scatter":
        from . import scatter

        return scatter, "scatter"
    from . import generic

    return generic, "generic"


def choose_schedule(kernel, target: str) -> dict:
    mod, which = _module_for(kernel)
    return getattr(mod, "choose_schedule")(kernel, target)


_POINTER = {"f32": "*fp32", "f16": "*fp16", "bf16": "*bf16", "f64": "*fp64", "i1": "*i1", "i8": "*i8",
            "i16": "*i16", "i32": "*i32", "i64": "*i64", "ui8": "*u8"}


def pointer_types(kernel) -> list[str]:
    """Triton pointer types of a kernel's operands: inputs, then results (for ASTSource signatures)."""
    from torch_mlir import ir

    ftype = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value)
    types = []
    for t in list(ftype.inputs) + list(ftype.results):
        if not isinstance(t, ir.ShapedType) and "uniorch.arg_dims" in kernel.attributes:
            continue  # an `index` argument sizing a tensor.empty: a size symbol, not a pointer
        et = str(ir.RankedTensorType(t).element_type)
        if et not in _POINTER:
            raise CodegenError(kernel, f"no Triton pointer type for element type {et}")
        types.append(_POINTER[et])
    return types


def generate(kernel, target: str) -> KernelSource:
    mod, which = _module_for(kernel)
    ks = getattr(mod, f"generate_{which}")(kernel, target)
    if not ks.pointer_types:
        ks.pointer_types = pointer_types(kernel)
    return ks
