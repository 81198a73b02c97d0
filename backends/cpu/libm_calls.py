"""Vendor math calls with no MLIR `math` op, as calls of the C math library the process has loaded.

lgamma and nextafter reach the cpu target as `tt.extern_elementwise` calls of CUDA's libdevice
(`__nv_lgammaf`) or ROCm's ocml (`__ocml_lgamma_f32`), which neither the adapter's nor
torch-mlir's MLIR can parse: the kernel ran on Triton's interpreter. libm has both under the
libdevice name (`lgammaf` for f32, `lgamma` for f64), and ATen's CPU kernels call the same
functions. The Bessel functions are not routed here: libm has j0, j1, y0 and y1, but ATen computes
its own (Cephes, aten/src/ATen/native/Math.h), 1e-6 away from glibc's near x = 5 in float64.

The extern call becomes an elementwise math op of the same arity (`math.erf`, `math.atan2`)
marked with the libm name, so `convert-elementwise-to-linalg` makes it a scalar op in a
linalg.generic body like any other; after bufferizing, `as_calls` replaces each marked op by a
`func.call` of the libm function, which the JIT resolves from the process.
"""
from __future__ import annotations

import re

# libdevice name (without the f32 suffix) -> arity
FUNCTIONS = {"lgamma": 1, "nextafter": 2}
MARK = "uniorch.libm"
_STAND_IN = {1: "math.erf", 2: "math.atan2"}


def libm_name(symbol: str) -> tuple[str, str] | None:
    """(the function, its libm name): ("lgamma", "lgammaf") for `__nv_lgammaf` or
    `__ocml_lgamma_f32`, ("lgamma", "lgamma") for the f64 ones; None for a function this module does
    not route to libm."""
    name = re.sub(r"^(__nv_|__ocml_)", "", symbol)
    m = re.fullmatch(r"(\w+?)_f(32|64)", name)
    if m:  # ocml
        base, f32 = m.group(1), m.group(2) == "32"
    elif name.endswith("f") and name[:-1] in FUNCTIONS:
        base, f32 = name[:-1], True
    else:
        base, f32 = name, False
    if base not in FUNCTIONS:
        return None
    return base, base + ("f" if f32 else "")


def stand_in(symbol: str, operands: str) -> str | None:
    """The marked math op replacing an extern call's `"tt.extern_elementwise"(operands) <{...}>`."""
    found = libm_name(symbol)
    if found is None:
        return None
    arity, name = FUNCTIONS[found[0]], found[1]
    if operands.count("%") != arity:
        return None
    return f'"{_STAND_IN[arity]}"{operands} <{{fastmath = #arith.fastmath<none>}}> {{{MARK} = "{name}"}}'


def as_calls(module) -> None:
    """Each marked scalar op of `module` (bufferized) as a call of its libm function, declared once."""
    from torch_mlir import ir
    from torch_mlir.dialects import func

    marked = []

    def visit(op):
        if MARK in op.attributes:
            marked.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    declared: set[str] = set()
    for op in marked:
        name = ir.StringAttr(op.attributes[MARK]).value
        if any(isinstance(v.type, ir.ShapedType) for v in op.operands):
            continue  # still on tensors: elementwise-to-linalg did not take it; the lowering fails loudly
        types = [v.type for v in op.operands]
        if name not in declared:
            with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown():
                decl = func.FuncOp(name, ir.FunctionType.get(types, [op.results[0].type]), visibility="private")
                decl.attributes["llvm.readnone"] = ir.UnitAttr.get()
            declared.add(name)
        with ir.InsertionPoint(op), op.location:
            call = func.CallOp([op.results[0].type], ir.FlatSymbolRefAttr.get(name), list(op.operands))
        op.results[0].replace_all_uses_with(call.results[0])
        op.erase()
