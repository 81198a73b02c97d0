"""Contraction kernels, shared pieces: element types, affine index expressions over the loop
dimensions (`Lin`), and small IR helpers. See contraction.py for the template as a whole."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from torch_mlir import ir

from .patterns import map_dims as _dims_of  # noqa: F401 - loop dims an affine map reads
from .source import CodegenError


_TL = {
    "f32": "tl.float32", "f16": "tl.float16", "bf16": "tl.bfloat16", "f64": "tl.float64",
    "i1": "tl.int1", "i8": "tl.int8", "i16": "tl.int16", "i32": "tl.int32", "i64": "tl.int64",
    "index": "tl.int32",
}
_PTR = {
    "f32": "*fp32", "f16": "*fp16", "bf16": "*bf16", "f64": "*fp64",
    "i1": "*i1", "i8": "*i8", "i16": "*i16", "i32": "*i32", "i64": "*i64",
}
_FLOATS = ("f16", "bf16", "f32", "f64")
_NP = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "bf16": np.float32,
       "i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "index": np.int64}


def _is_float(ty: str) -> bool:
    return ty in _FLOATS


# ----------------------------------------------------------------------------------------------
# affine index expressions over the contraction's loop dimensions


@dataclass(frozen=True)
class Lin:
    """sum(coeff * d_dim) + const, dimensions of the contraction's iteration domain."""

    terms: tuple = ()  # sorted ((dim, coeff), ...), coeff != 0
    const: int = 0

    @staticmethod
    def dim(d: int) -> "Lin":
        return Lin(((d, 1),), 0)

    @staticmethod
    def cst(c: int) -> "Lin":
        return Lin((), int(c))

    def __add__(self, other: "Lin") -> "Lin":
        acc = dict(self.terms)
        for d, c in other.terms:
            acc[d] = acc.get(d, 0) + c
        return Lin(tuple(sorted((d, c) for d, c in acc.items() if c != 0)), self.const + other.const)

    def scale(self, k: int) -> "Lin":
        if k == 0:
            return Lin.cst(0)
        return Lin(tuple((d, c * k) for d, c in self.terms), self.const * k)

    def dims(self) -> set:
        return {d for d, _ in self.terms}

    def is_const(self) -> bool:
        return not self.terms


@dataclass(frozen=True)
class Quot:
    """lin // k (k > 1): an element of a strided slice's source (a transposed convolution's input
    inside its zero-stuffed buffer). Only read where lin is a non-negative multiple of k."""

    lin: Lin
    k: int

    def dims(self) -> set:
        return self.lin.dims()

    def is_const(self) -> bool:
        return False


def _maps(op) -> list:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _iterators(op) -> list[str]:
    return ["reduction" if "reduction" in str(a) else "parallel" for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def _lin(expr, env: list, op) -> Lin:
    """An affine expression of a generic's loop dims, with `env[d]` the Lin of loop dim d."""
    e = expr.maybe_downcast()
    if isinstance(e, ir.AffineDimExpr):
        if env[e.position] is None:
            raise CodegenError(op, f"loop dimension d{e.position} is not tied to the contraction's domain")
        return env[e.position]
    if isinstance(e, ir.AffineConstantExpr):
        return Lin.cst(e.value)
    if isinstance(e, ir.AffineAddExpr):
        return _lin(e.lhs, env, op) + _lin(e.rhs, env, op)
    if isinstance(e, ir.AffineMulExpr):
        lhs, rhs = _lin(e.lhs, env, op), _lin(e.rhs, env, op)
        if rhs.is_const():
            return lhs.scale(rhs.const)
        if lhs.is_const():
            return rhs.scale(lhs.const)
    raise CodegenError(op, f"indexing expression '{expr}' is not a sum of scaled dimensions")


def _dim_pos(expr):
    e = expr.maybe_downcast()
    return e.position if isinstance(e, ir.AffineDimExpr) else None


def _const_of(expr):
    e = expr.maybe_downcast()
    return e.value if isinstance(e, ir.AffineConstantExpr) else None


# ----------------------------------------------------------------------------------------------
# IR helpers


def _as_op(x):
    return getattr(x, "operation", x)


def kernel_parts(kernel) -> tuple:
    """(func op, symbol name, block arguments, body ops) of an outlined kernel function."""
    func = _as_op(kernel)
    block = func.regions[0].blocks[0]
    args = list(block.arguments)
    if "uniorch.arg_dims" in func.attributes:  # `index` arguments only size tensor.empty ops (passes/schedule.py)
        args = [a for a in args if isinstance(a.type, ir.ShapedType)]
    return (func, ir.StringAttr(func.attributes["sym_name"]).value, args, [_as_op(o) for o in block.operations])


def _producer(value):
    """The Operation defining `value`, or None for a block argument."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return _as_op(owner)


def _shape(value) -> list:
    """Dims of a value; symbolic ones as expressions over the size symbols (uniorch/ir/dims.py)."""
    from uniorch.ir import dims

    try:
        return dims.known_shape(value)
    except dims.UnknownSize as err:
        raise CodegenError(_producer(value), f"symbolic sizes: {err}") from None


def _elem(value) -> str:
    t = value.type
    if isinstance(t, ir.ShapedType):
        return str(t.element_type)
    return str(t)


def _is_shaped(value) -> bool:
    return isinstance(value.type, ir.ShapedType)


def _loc(op) -> str:
    return str(op.location)


def _lit(value, ty: str) -> str:
    """Python literal text for a compile-time scalar of MLIR type `ty`."""
    if ty == "i1":
        return "True" if bool(value) else "False"
    if not _is_float(ty):
        return str(int(value))
    v = float(value)
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return 'float("inf")' if v > 0 else 'float("-inf")'
    return repr(v)


def _round(value, ty: str):
    """`value` rounded to MLIR type `ty` (compile-time constant folding)."""
    if ty == "i1":
        return bool(value)
    if ty == "bf16":
        import torch

        return float(torch.tensor(float(value), dtype=torch.float32).to(torch.bfloat16).float())
    if _is_float(ty):
        with np.errstate(all="ignore"):
            return float(_NP[ty](value))
    bits = {"i8": 8, "i16": 16, "i32": 32, "i64": 64, "index": 64}.get(ty, 64)
    v = int(value) & ((1 << bits) - 1)
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def _const_value(op):
    """Python value of a scalar arith.constant."""
    attr = op.attributes["value"]
    ty = str(op.results[0].type)
    if _is_float(ty):
        return ir.FloatAttr(attr).value
    if ty == "i1":
        return bool(ir.IntegerAttr(attr).value)
    return ir.IntegerAttr(attr).value


@dataclass
class _Val:
    text: str
    ty: str                      # MLIR scalar type
    cls: frozenset = frozenset()  # tile axes it varies along: "m", "n", "k"
    const: object = None         # compile-time value, if any
    zero_k: bool = False         # zero outside the K extent (masked load, other=0)
