"""arith / math ops of linalg bodies → Triton expressions, as a table.

Each entry maps an op name to a template over its operands `{0}`, `{1}`, `{2}` (variable names or
literals, so repeating one is free) and type slots: `{T}` the result's Triton dtype, `{S}` the
first operand's, `{UT}`/`{US}` their unsigned twins (for unsigned predicates, divisions, shifts and
casts). A few ops depend on more than types (i1 casts, constant exponents); they are functions.
Float math that Triton only has for fp32/fp64 is computed in fp32 for f16/bf16 operands and rounded
back. Helper functions (`_tanh`, `_powf`, ...) are emitted into the kernel module when used; they
are written only with core `tl` ops so the same source runs on GPUs and in the interpreter.
"""
from __future__ import annotations

import math

from torch_mlir import ir

from .source import CodegenError
from .special import HELPERS as _SPECIAL_HELPERS
from .special import SPECIAL

# MLIR element type -> (Triton dtype, Triton pointer signature type, unsigned twin)
DTYPES = {
    "f32": ("tl.float32", "*fp32", None), "f64": ("tl.float64", "*fp64", None),
    "f16": ("tl.float16", "*fp16", None), "bf16": ("tl.bfloat16", "*bf16", None),
    "i1": ("tl.int1", "*i1", "tl.int1"), "i8": ("tl.int8", "*i8", "tl.uint8"),
    "i16": ("tl.int16", "*i16", "tl.uint16"), "i32": ("tl.int32", "*i32", "tl.uint32"),
    "i64": ("tl.int64", "*i64", "tl.uint64"), "index": ("tl.int64", None, "tl.uint64"),
    "ui8": ("tl.uint8", "*u8", "tl.uint8"),
}
FLOATS = ("f32", "f64", "f16", "bf16")
BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "index": 64, "ui8": 8}


def type_name(t: ir.Type) -> str:
    s = str(t)
    if s not in DTYPES:
        raise KeyError(s)
    return s


def elem_name(t: ir.Type) -> str:
    """Element type name of a tensor type, or the scalar type's name."""
    if isinstance(t, ir.ShapedType):
        t = ir.ShapedType(t).element_type
    return type_name(t)


def tl_type(name: str) -> str:
    return DTYPES[name][0]



def size_scalar(size, ty: str) -> str:
    """A kernel's scalar argument computed from the size parameters (`uniorch.arg_dims`) as Triton
    code: a float one (a mean's 1 / n) in double, as eager's Python arithmetic, else an int64."""
    from uniorch.ir import dims

    if ty in ("f32", "f64"):
        return dims.float_code(size, tl_type(ty))
    return f"tl.full([], {dims.code(size)}, tl.int64)"

def unsigned(name: str) -> str:
    u = DTYPES[name][2]
    if u is None:
        raise KeyError(name)
    return u


def pointer_type(t: ir.Type) -> str:
    name = elem_name(t)
    ptr = DTYPES[name][1]
    if ptr is None:
        raise KeyError(name)
    return ptr


def literal(value, name: str) -> str:
    """A Python literal usable in Triton source for `value` of type `name`."""
    if name in FLOATS:
        v = float(value)
        if math.isnan(v):
            return 'float("nan")'
        if math.isinf(v):
            return 'float("inf")' if v > 0 else 'float("-inf")'
        return repr(v)
    if name == "i1":
        return "True" if value else "False"
    return str(int(value))


def full_expr(shape: str, lit: str, tl_name: str) -> str:
    """`tl.full(shape, lit, tl_name)`. Triton's builder makes bf16 constants through a 6-decimal
    text form (1e-7 became 0 for the GPU, while the interpreter kept it), so bf16 is filled in
    fp32, exact for a bf16 value, and converted."""
    if tl_name == "tl.bfloat16":
        return f"tl.full({shape}, {lit}, tl.float32).to(tl.bfloat16)"
    return f"tl.full({shape}, {lit}, {tl_name})"


def constant_expr(value, name: str) -> str:
    """A typed 0-d tensor holding `value`: binary ops then never promote."""
    return full_expr("[]", literal(value, name), tl_type(name))


def identity_value(spec, name: str):
    """Identity of a combiner (patterns.COMBINERS entry) for element type `name`."""
    if spec == "ones":
        return 1 if name == "i1" else -1
    if spec == "smin":
        return 0 if name == "i1" else -(1 << (BITS[name] - 1))
    if spec == "smax":
        return 1 if name == "i1" else (1 << (BITS[name] - 1)) - 1
    return spec


# -- the table --------------------------------------------------------------------------------------
_IDIV_GUARD = "tl.where({1} == 0, 1, {1})"  # masked lanes load 0: never divide by it (UB on GPUs)

TABLE: dict[str, str] = {
    # float arithmetic
    "arith.addf": "{0} + {1}",
    "arith.subf": "{0} - {1}",
    "arith.mulf": "{0} * {1}",
    "arith.divf": "{0} / {1}",
    "arith.remf": "{0} % {1}",  # C fmod, as arith.remf
    "arith.negf": "-{0}",
    # NaN-propagating vs NaN-ignoring min/max
    "arith.maximumf": "tl.where(({0} > {1}) | ({0} != {0}), {0}, {1})",
    "arith.minimumf": "tl.where(({0} < {1}) | ({0} != {0}), {0}, {1})",
    "arith.maxnumf": "tl.where(({0} > {1}) | ({1} != {1}), {0}, {1})",
    "arith.minnumf": "tl.where(({0} < {1}) | ({1} != {1}), {0}, {1})",
    # integer arithmetic (Triton's // and % on signed ints are C's truncating divsi/remsi)
    "arith.addi": "{0} + {1}",
    "arith.subi": "{0} - {1}",
    "arith.muli": "{0} * {1}",
    "arith.divsi": "{0} // " + _IDIV_GUARD,
    "arith.remsi": "{0} % " + _IDIV_GUARD,
    "arith.divui": "({0}.to({US}, bitcast=True) // " + _IDIV_GUARD.replace("{1}", "{1}.to({US}, bitcast=True)")
                   + ").to({T}, bitcast=True)",
    "arith.remui": "({0}.to({US}, bitcast=True) % " + _IDIV_GUARD.replace("{1}", "{1}.to({US}, bitcast=True)")
                   + ").to({T}, bitcast=True)",
    "arith.floordivsi": "_floordiv({0}, " + _IDIV_GUARD + ")",
    "arith.ceildivsi": "-_floordiv(-{0}, " + _IDIV_GUARD + ")",
    "arith.maxsi": "tl.maximum({0}, {1})",
    "arith.minsi": "tl.minimum({0}, {1})",
    "arith.maxui": "tl.maximum({0}.to({US}, bitcast=True), {1}.to({US}, bitcast=True)).to({T}, bitcast=True)",
    "arith.minui": "tl.minimum({0}.to({US}, bitcast=True), {1}.to({US}, bitcast=True)).to({T}, bitcast=True)",
    "arith.andi": "{0} & {1}",
    "arith.ori": "{0} | {1}",
    "arith.xori": "{0} ^ {1}",
    "arith.shli": "{0} << {1}",
    "arith.shrsi": "{0} >> {1}",
    "arith.shrui": "({0}.to({US}, bitcast=True) >> {1}.to({US}, bitcast=True)).to({T}, bitcast=True)",
    "arith.select": "tl.where({0}, {1}, {2})",
    # casts (special cases for i1 below)
    "arith.extf": "{0}.to({T})",
    "arith.truncf": "{0}.to({T})",
    "arith.sitofp": "{0}.to({T})",
    "arith.uitofp": "{0}.to({US}, bitcast=True).to({T})",
    "arith.fptosi": "{0}.to({T})",
    "arith.fptoui": "{0}.to({UT}).to({T}, bitcast=True)",
    "arith.extsi": "{0}.to({T})",
    "arith.extui": "{0}.to({US}, bitcast=True).to({T})",
    "arith.trunci": "{0}.to({T})",
    "arith.index_cast": "{0}.to({T})",
    "arith.index_castui": "{0}.to({US}, bitcast=True).to({T})",
    "arith.bitcast": "{0}.to({T}, bitcast=True)",
    # math (float ops computed in fp32 for f16/bf16, see FLOAT_MATH)
    "math.exp": "tl.exp({0})",
    "math.exp2": "tl.exp2({0})",
    "math.expm1": "_expm1({0})",
    "math.log": "tl.log({0})",
    "math.log2": "tl.log2({0})",
    "math.log10": "tl.log({0}) * 0.4342944819032518",
    "math.log1p": "_log1p({0})",
    "math.sqrt": "tl.sqrt({0})",
    "math.rsqrt": "tl.rsqrt({0})",
    "math.cbrt": "_cbrt({0})",
    "math.sin": "tl.sin({0})",
    "math.cos": "tl.cos({0})",
    "math.tan": "tl.sin({0}) / tl.cos({0})",
    "math.tanh": "_tanh({0})",
    "math.sinh": "_sinh({0})",
    "math.cosh": "_cosh({0})",
    "math.erf": "tl.erf({0})",
    "math.absf": "tl.abs({0})",
    "math.absi": "tl.abs({0})",
    "math.floor": "tl.floor({0})",
    "math.ceil": "tl.ceil({0})",
    "math.trunc": "_trunc({0})",
    "math.round": "_round({0})",
    "math.roundeven": "_roundeven({0})",
    "math.powf": "_powf({0}, {1})",
    "math.fma": "{0} * {1} + {2}",
    "math.copysign": "tl.where(({1} < 0) | ((({1} == 0) & (1.0 / {1} < 0))), -tl.abs({0}), tl.abs({0}))",
    "math.isnan": "{0} != {0}",
    "math.isinf": "tl.abs({0}) == float(\"inf\")",
    "math.isfinite": "tl.abs({0}) < float(\"inf\")",
    # inverse trigonometric / hyperbolic functions and erfc: Triton's core has none, so the vendor
    # math library (see codegen/special.py for how `libdevice` resolves, the interpreter included)
    "math.acos": "libdevice.acos({0})",
    "math.acosh": "libdevice.acosh({0})",
    "math.asin": "libdevice.asin({0})",
    "math.asinh": "libdevice.asinh({0})",
    "math.atan": "libdevice.atan({0})",
    "math.atan2": "libdevice.atan2({0}, {1})",
    "math.atanh": "libdevice.atanh({0})",
    "math.erfc": "libdevice.erfc({0})",
}
FLOAT_MATH = {k for k in TABLE if k.startswith("math.") and k not in ("math.absi", "math.fma", "math.isnan",
                                                                   "math.absf", "math.copysign")}

# arith.cmpf / arith.cmpi predicates by enum value
CMPF = {
    0: "tl.zeros_like({0}) != 0",  # false (broadcast shape kept)
    1: "{0} == {1}", 2: "{0} > {1}", 3: "{0} >= {1}", 4: "{0} < {1}", 5: "{0} <= {1}",
    6: "({0} != {1}) & ({0} == {0}) & ({1} == {1})",  # one
    7: "({0} == {0}) & ({1} == {1})",  # ord
    8: "({0} == {1}) | ({0} != {0}) | ({1} != {1})",  # ueq
    9: "~({0} <= {1})", 10: "~({0} < {1})", 11: "~({0} >= {1})", 12: "~({0} > {1})",  # ugt uge ult ule
    13: "{0} != {1}",  # une
    14: "({0} != {0}) | ({1} != {1})",  # uno
    15: "tl.zeros_like({0}) == 0",  # true
}
CMPI = {
    0: "{0} == {1}", 1: "{0} != {1}", 2: "{0} < {1}", 3: "{0} <= {1}", 4: "{0} > {1}", 5: "{0} >= {1}",
    6: "{0}.to({US}, bitcast=True) < {1}.to({US}, bitcast=True)",
    7: "{0}.to({US}, bitcast=True) <= {1}.to({US}, bitcast=True)",
    8: "{0}.to({US}, bitcast=True) > {1}.to({US}, bitcast=True)",
    9: "{0}.to({US}, bitcast=True) >= {1}.to({US}, bitcast=True)",
}

# Triton's float sum combiner: tl.sum's, compiled the same as `a + b`, and the one the interpreter
# reduces with numpy instead of calling a combine function per element pair (a per-pair Python
# call made a training test of MobileNet's block take minutes)
SUM_COMBINE = "tl.standard._sum_combine"

# helpers a template may call: name -> source (emitted once per module when used)
HELPERS = {
    # a row statistic reduced from a contraction's A tile (contraction_emit.row_sum); tl.sum is
    # itself a jit function, which the interpreter does not call from a kernel's helpers' module.
    # Its combiner, Triton's own (SUM_COMBINE), is what the interpreter sums with numpy
    "_row_sum": '''@jit
def _row_sum(x):
    return tl.reduce(x, 1, tl.standard._sum_combine)[:, None]
''',
    # torch's max and min propagate NaN (a tile statistic's partial: contraction_stats.py)
    "_maximumf_combine": '''@jit
def _maximumf_combine(a, b):
    return tl.where((a > b) | (a != a), a, b)
''',
    "_minimumf_combine": '''@jit
def _minimumf_combine(a, b):
    return tl.where((a < b) | (a != a), a, b)
''',
    "_sum_combine": '''@jit
def _sum_combine(a, b):
    return a + b
''',
    "_floordiv": '''@jit
def _floordiv(a, b):
    q = a // b
    return q - (((a % b) != 0) & ((a < 0) != (b < 0))).to(q.dtype)
''',
    "_floormod": '''@jit
def _floormod(a, b):
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
''',
    "_tanh": '''@jit
def _tanh(x):
    # Cephes tanhf: odd polynomial below 0.625 (where 1 - 2/(e^2x + 1) cancels), exp formula above
    z = x * x
    small = ((((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z + 1.33314422036e-1) * z
             - 3.33332819422e-1) * z * x + x
    ax = tl.abs(x)
    ax = tl.where(ax > 20.0, 20.0, ax)  # tanh(20) rounds to 1; keeps NaN
    big = 1.0 - 2.0 / (tl.exp(2.0 * ax) + 1.0)
    big = tl.where(x < 0, -big, big)
    return tl.where(x == 0, x, tl.where(tl.abs(x) < 0.625, small, big))  # tanh(-0.0) is -0.0
''',
    "_tanh64": '''@jit
def _tanh64(x):
    # Cephes tanh (double): rational approximation below 0.625, exp formula above
    z = x * x
    p = (-9.64399179425052238628e-1 * z - 9.92877231001918586564e1) * z - 1.61468768441708447952e3
    q = ((z + 1.12811678491632931402e2) * z + 2.23548839060100448583e3) * z + 4.84406305325125486048e3
    small = x + x * z * p / q
    ax = tl.abs(x)
    ax = tl.where(ax > 40.0, 40.0, ax)
    big = 1.0 - 2.0 / (tl.exp(2.0 * ax) + 1.0)
    big = tl.where(x < 0, -big, big)
    return tl.where(x == 0, x, tl.where(tl.abs(x) < 0.625, small, big))  # tanh(-0.0) is -0.0
''',
    "_sinh": '''@jit
def _sinh(x):
    # (e^x - e^-x) / 2 cancels below |x| ~ 1 (19% off at 1e-7): there from expm1, which does not;
    # past e^x's overflow (88.7) as (e^(x/2) / 2) e^(x/2), finite up to sinh's own (89.4)
    a = tl.abs(x)
    t = _expm1(a)
    e = tl.exp(a)
    h = tl.exp(0.5 * a)
    r = tl.where(a < 1.0, 0.5 * (t + t / (t + 1.0)), tl.where(a < 88.0, 0.5 * (e - 1.0 / e), (0.5 * h) * h))
    return tl.where(a == 0, x, tl.where(x < 0, -r, r))
''',
    "_cosh": '''@jit
def _cosh(x):
    a = tl.abs(x)
    e = tl.exp(a)
    h = tl.exp(0.5 * a)
    return tl.where(a < 88.0, 0.5 * (e + 1.0 / e), (0.5 * h) * h)
''',
    "_powf": '''@jit
def _powf(a, b):
    # C pow: |a|^b, negative bases only for integral b (sign from its parity)
    r = tl.exp2(b * tl.log2(tl.abs(a)))
    bi = tl.floor(b)
    integral = bi == b
    finite = tl.abs(b) != float("inf")  # an infinite exponent is even, and pow(-1, +-inf) = 1
    odd = integral & finite & ((bi - 2.0 * tl.floor(bi * 0.5)) != 0)
    r = tl.where((a < 0) & odd, -r, r)
    r = tl.where((a < 0) & (~integral), float("nan"), r)
    r = tl.where((b == 0) | (a == 1) | ((a == -1) & ~finite), 1.0, r)
    return r
''',
    "_trunc": '''@jit
def _trunc(x):
    return tl.where(x < 0, -tl.floor(-x), tl.floor(x))
''',
    "_round": '''@jit
def _round(x):
    # half away from zero, exact (no x + 0.5 rounding trap)
    a = tl.abs(x)
    t = tl.floor(a)
    r = t + ((a - t) >= 0.5).to(t.dtype)
    return tl.where(x < 0, -r, r)
''',
    "_roundeven": '''@jit
def _roundeven(x):
    t = tl.floor(x)
    d = x - t
    odd = (t - 2.0 * tl.floor(t * 0.5)) != 0
    up = (d > 0.5) | ((d == 0.5) & odd)
    return t + up.to(t.dtype)
''',
    "_log1p": '''@jit
def _log1p(x):
    u = 1.0 + x
    d = u - 1.0
    return tl.where(d == 0, x, tl.log(u) * (x / tl.where(d == 0, 1.0, d)))
''',
    "_expm1": '''@jit
def _expm1(x):
    u = tl.exp(x)
    d = u - 1.0
    lu = tl.log(u)
    return tl.where(d == 0, x, tl.where(d == -1.0, -1.0, d * (x / tl.where(lu == 0, 1.0, lu))))
''',
    "_cbrt": '''@jit
def _cbrt(x):
    r = tl.exp2(tl.log2(tl.abs(x)) * 0.3333333333333333)
    return tl.where(x < 0, -r, r)
''',
}
HELPERS.update(_SPECIAL_HELPERS)
SPECIAL_PREFIX = "__uniorch_math_"  # callee names of uniorch/ir/special.py


# ops that only move or reinterpret bits (exact on bf16 as is)
_BITS_ONLY = ("arith.select", "arith.extf", "arith.truncf", "arith.bitcast", "arith.sitofp", "arith.uitofp",
              "arith.fptosi", "arith.fptoui")


def combine_expression(comb: str, ty: str) -> str:
    """Body of a combine function `(a, b) -> ...` for combiner op `comb` on element type `ty`."""
    template = TABLE[comb]
    if ty == "bf16":
        inner = template.format("a32", "b32", T="tl.float32", S="tl.float32", UT="tl.float32", US="tl.float32")
        return f"a32 = a.to(tl.float32)\n    b32 = b.to(tl.float32)\n    return ({inner}).to(tl.bfloat16)"
    return "return " + template.format("a", "b", T="a.dtype", S="a.dtype", UT="a.dtype", US="a.dtype")


def _predicate(op: ir.Operation) -> int:
    return ir.IntegerAttr(op.attributes["predicate"]).value


def helpers_used(text: str) -> list[str]:
    """Helpers `text` calls, and the helpers those call (special functions build on _powf)."""
    used = [h for h in HELPERS if h + "(" in text or ", " + h + ")" in text]  # called, or a combine fn
    i = 0
    while i < len(used):
        body = HELPERS[used[i]].split("\n", 2)[2]  # after `@jit` and the def line
        used += [h for h in HELPERS if h not in used and (h + "(" in body or ", " + h + ")" in body)]
        i += 1
    return used


def _upcast(text: str) -> str:
    """`text` as fp32. Python literals (constants the contraction template inlines) are weakly
    typed and have no `.to`: they take the other operand's fp32 type as they are."""
    try:
        float(text)
        return text
    except ValueError:
        return f"{text}.to(tl.float32)"


def expression(op: ir.Operation, args: list[str], arg_types: list[str], result_type: str,
               const_of=lambda i: None) -> str:
    """Triton text computing `op`'s (single) result from operand texts.

    `arg_types`/`result_type` are MLIR element type names; `const_of(i)` gives operand i's value
    when it is a compile-time constant (exponents of powf/fpowi), else None.
    """
    name = op.name
    if "bf16" in arg_types + [result_type] and name not in _BITS_ONLY:
        # bf16 arithmetic per op in fp32, rounded back: torch's own per-op rounding, and the only
        # form Triton's interpreter gets right (it computes bf16 on raw bits)
        up = [_upcast(a) if t == "bf16" else a for a, t in zip(args, arg_types)]
        up_types = ["f32" if t == "bf16" else t for t in arg_types]
        text = expression(op, up, up_types, "f32" if result_type == "bf16" else result_type, const_of)
        return f"({text}).to(tl.bfloat16)" if result_type == "bf16" else text
    src = arg_types[0] if arg_types else result_type
    fill = {"T": tl_type(result_type), "S": tl_type(src)}
    for key, ty in (("UT", result_type), ("US", src)):
        try:
            fill[key] = unsigned(ty)
        except KeyError:
            fill[key] = fill[key[1]]

    def fmt(template: str, a: list[str]) -> str:
        return template.format(*a, **fill)

    # -- casts and ops whose meaning depends on i1 or on constant operands --
    if name == "arith.cmpf":
        pred = _predicate(op)
        if pred in (6, 7, 8, 14):  # (un)ordered: NaN tests only for operands that can be NaN
            nan_free = [const_of(i) is not None and const_of(i) == const_of(i) for i in range(2)]
            ordered = [f"({a} == {a})" for a, c in zip(args, nan_free) if not c]
            unordered = [f"({a} != {a})" for a, c in zip(args, nan_free) if not c]
            base = {6: f"({args[0]} != {args[1]})", 8: f"({args[0]} == {args[1]})"}.get(pred)
            if pred in (6, 7):
                terms = ([base] if base else []) + ordered
                return " & ".join(terms) if terms else f"{args[0]} == {args[0]}"
            terms = ([base] if base else []) + unordered
            return " | ".join(terms) if terms else f"{args[0]} != {args[0]}"
        return fmt(CMPF[pred], args)
    if name == "arith.cmpi":
        pred = _predicate(op)
        if src == "i1" and pred >= 6:  # false < true as unsigned: logic, not Triton's i1 order
            a, b = (f"({v} != 0)" for v in args)
            na, nb = (f"({v} == 0)" for v in args)
            return {6: f"({na} & {b})", 7: f"({na} | {b})", 8: f"({a} & {nb})", 9: f"({a} | {nb})"}[pred]
        return fmt(CMPI[pred], args)
    if name in ("arith.extsi", "arith.sitofp") and src == "i1":
        return f"tl.where({args[0]}, -1, 0).to({fill['T']})"
    if name in ("arith.extui", "arith.uitofp", "arith.index_castui") and src == "i1":
        return f"{args[0]}.to({fill['T']})"
    if name in ("arith.trunci", "arith.index_cast") and result_type == "i1":
        return f"({args[0]} & 1) != 0"
    if name in ("arith.fptosi", "arith.fptoui") and result_type == "i1":
        raise CodegenError(op, "float to i1 conversion")
    if name == "func.call":
        # a special function carried from the torch dialect (uniorch/ir/special.py)
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        template = SPECIAL.get(callee[len(SPECIAL_PREFIX):]) if callee.startswith(SPECIAL_PREFIX) else None
        if template is None:
            raise CodegenError(op, f"no Triton implementation of @{callee}")
        return fmt(template, args)
    if name == "math.powf" and const_of(0) is not None and const_of(1) is None:
        # constant base (exp2 and logaddexp2 come as powf(2, x)): 2**x is exactly exp2; other bases
        # go to _powf as a typed 0-d tensor, never as a Python float (whose `a < 0` is a Python bool
        # that Triton's interpreter cannot `&` with a tensor)
        base = float(const_of(0))
        low = result_type in ("f16", "bf16")
        x = _upcast(args[1]) if low else args[1]
        if base == 2.0:
            text = f"tl.exp2({x})"
        else:
            text = f"_powf({constant_expr(base, 'f32' if low else result_type)}, {x})"
        return f"({text}).to({fill['T']})" if low else text
    if name in ("math.fpowi", "math.ipowi") or (name == "math.powf" and const_of(1) is not None):
        return _pow(op, args, arg_types, result_type, const_of, fill)
    template = TABLE.get(name)
    if template is None:
        raise CodegenError(op, "no Triton translation for this op")
    if name == "math.tanh" and src == "f64":
        template = "_tanh64({0})"
    if name in FLOAT_MATH and src in ("f16", "bf16"):
        up = [_upcast(a) if t in ("f16", "bf16") else a for a, t in zip(args, arg_types)]
        return f"({fmt(template, up)}).to({fill['T']})"
    return fmt(template, args)


def _pow(op, args, arg_types, result_type, const_of, fill) -> str:
    x, n_text = args[0], args[1]
    n = const_of(1)
    low = result_type in ("f16", "bf16")
    if n is not None and float(n) == int(n) and abs(int(n)) <= 16:
        k = abs(int(n))
        if k == 0:
            return f"tl.full([], 1, {fill['T']}) + {x} * 0"
        # binary powering, exact for the squares torch itself special-cases (x*x, x*x*x)
        base, e = x, k
        factors = []
        while e:
            if e & 1:
                factors.append(base)
            e >>= 1
            if e:
                base = f"({base} * {base})"
        prod = " * ".join(factors)
        return f"(1.0 / ({prod}))" if int(n) < 0 else f"({prod})"
    if n is not None and float(n) == 0.5:
        return f"tl.sqrt({x})" if not low else f"tl.sqrt({x}.to(tl.float32)).to({fill['T']})"
    if n is not None and float(n) == -0.5:
        return f"tl.rsqrt({x})" if not low else f"tl.rsqrt({x}.to(tl.float32)).to({fill['T']})"
    if op.name == "math.ipowi":
        raise CodegenError(op, "integer power with a non-constant exponent")
    nf = n_text if arg_types[1] in FLOATS else f"{n_text}.to({fill['T']})"
    if low:
        return f"_powf({x}.to(tl.float32), {nf}.to(tl.float32)).to({fill['T']})"
    return f"_powf({x}, {nf})"


def affine_code(e, dims: list[str], syms: list[str]) -> str:
    """Triton text of an affine expression over index values (floor semantics for div/mod)."""
    if isinstance(e, ir.AffineDimExpr):
        return dims[e.position]
    if isinstance(e, ir.AffineSymbolExpr):
        return syms[e.position]
    if isinstance(e, ir.AffineConstantExpr):
        return f"tl.full([], {e.value}, tl.int64)"
    a, b = affine_code(e.lhs, dims, syms), affine_code(e.rhs, dims, syms)
    if isinstance(e, ir.AffineAddExpr):
        return f"({a} + {b})"
    if isinstance(e, ir.AffineMulExpr):
        return f"({a} * {b})"
    if isinstance(e, ir.AffineFloorDivExpr):
        return f"_floordiv({a}, {b})"
    if isinstance(e, ir.AffineModExpr):
        return f"_floormod({a}, {b})"
    if isinstance(e, ir.AffineCeilDivExpr):
        return f"(-_floordiv(-{a}, {b}))"
    raise CodegenError(None, f"affine expression {e}")
