"""Sizes of `?` dims, as expressions over the capture's size symbols.

A symbolic capture (docs/design.md, "Symbolic sizes") gives `@main` arguments typed `?` where a
size is a symbol of the capture (`s10`, `s73`). Every other `?` in the program is a function of
those: `@main` carries `uniorch.arg_dims` (per argument, per dim: "" when static, else the
symbol), and `shape(v)` derives any value's dims from it: through a linalg op's `outs`, a
`tensor.empty`'s operands, the index arithmetic torch-mlir emits (`tensor.dim`, `arith.muli`,
the `select`s of a view's -1), collapses, expansions and reshapes. Sizes are sympy expressions
with positive integer symbols, so equal sizes compare equal however they were computed, and the
comparisons torch-mlir emits against -1 or 0 are decided.

Kernel functions carry `uniorch.arg_dims` too (written when they are outlined): a tensor
argument's dims, and for an `index` argument (a size a `tensor.empty` inside needs) its value.
Codegen takes the symbols as kernel arguments and prints the expressions; the launch plan binds
the symbols from `@main`'s inputs per call.
"""
from __future__ import annotations

import contextlib
import functools
import math
import re
import threading
from typing import Union

import sympy
from sympy.printing.precedence import precedence
from sympy.printing.str import StrPrinter
from torch_mlir import ir

ARG_DIMS = "uniorch.arg_dims"
RANGES = "uniorch.size_ranges"  # on @main: symbol -> [low, high], where the trace bounded it
RELATIONS = "uniorch.size_relations"  # on @main: "lhs op rhs" guards relating symbols ("s1 <= s0")
_local = threading.local()
Size = Union[int, sympy.Expr]


class UnknownSize(ValueError):
    """A `?` dim no rule derives (an op whose sizes depend on data, or one not handled here)."""


@functools.lru_cache(maxsize=None)
def symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, positive=True)


# what a size expression may hold: it comes from MLIR attributes and bundle files, which anyone can
# write, and sympify evaluates Python; symbols, integers, arithmetic and these functions only
_NAMES = {"ceiling": sympy.ceiling, "floor": sympy.floor, "Max": sympy.Max, "Min": sympy.Min, "Mod": sympy.Mod,
          "Abs": sympy.Abs, "sqrt": sympy.sqrt}
_SIZE_TEXT = re.compile(r"[A-Za-z0-9_+\-*/(), ]*")


@functools.lru_cache(maxsize=4096)
def parse(text: str) -> Size:
    """A size's text as `text` or sympy prints it; anything but a size expression is an error."""
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    bad = [w for w in words if w not in _NAMES and not re.fullmatch(r"[a-z]+[0-9]+", w)]
    if not _SIZE_TEXT.fullmatch(text) or bad or "__" in text:
        raise ValueError(f"not a size expression: {text!r}")
    locals_ = dict(_NAMES, **{w: symbol(w) for w in words if w not in _NAMES})
    expr = sympy.sympify(text, locals=locals_)
    return int(expr) if expr.is_number else expr


def text(size: Size) -> str:
    return str(size)


class _CodePrinter(StrPrinter):
    """Sizes as Triton expressions: powers written out (`s1*s1`; Triton has no `**` on tensors),
    floor and ceiling of a quotient as integer divisions (operands are sizes, not negative)."""

    def _quotient(self, expr):
        num, den = sympy.fraction(sympy.together(expr.args[0]))
        if not (den.is_Integer and den > 0):
            raise UnknownSize(f"{expr} has no integer form")
        return self.doprint(num), int(den), bounds(num)[0] >= 0

    def _print_Max(self, expr):
        return self._pairwise("tl.maximum", expr.args)

    def _print_Min(self, expr):
        return self._pairwise("tl.minimum", expr.args)

    def _pairwise(self, fn: str, args) -> str:
        out = self.doprint(args[0])
        for a in args[1:]:
            out = f"{fn}({out}, {self.doprint(a)})"
        return out

    def _print_floor(self, expr):
        num, den, whole = self._quotient(expr)
        if whole:
            return f"(({num}) // {den})"
        # a numerator that may be negative (`-(-n // 4)`, the ceil idiom): Triton's `//` truncates
        # toward zero, so the remainder taken to [0, den) first makes the division exact
        return f"((({num}) - ((({num}) % {den} + {den}) % {den})) // {den})"

    def _print_ceiling(self, expr):
        num, den, whole = self._quotient(expr)
        if whole:
            return f"(({num} + {den - 1}) // {den})"
        neg = f"(-({num}))"
        return f"(-(({neg} - (({neg} % {den} + {den}) % {den})) // {den}))"

    def _print_Pow(self, expr, rational=False):
        if expr.exp.is_Integer and expr.exp > 0:
            base = self.parenthesize(expr.base, precedence(expr), strict=False)
            return "*".join([base] * int(expr.exp))
        return super()._print_Pow(expr, rational)


_PRINTER = _CodePrinter()


def code(size: Size) -> str:
    """A size as a Python/Triton operand: a compound expression parenthesized, so `rows // (8*s1)`
    never reads as `(rows // 8) * s1`."""
    if isinstance(size, int) or size.is_Symbol or size.is_Integer:
        return str(size)
    return f"({_PRINTER.doprint(size)})"


class _FloatPrinter(_CodePrinter):
    """A float computed from sizes (1 / n, n / 2) as a Triton float64 scalar: each size converted
    before any arithmetic, so quotients keep their fraction and round as eager's double does."""

    def _print_Symbol(self, expr):
        return f"tl.full([], {expr.name}, tl.float64)"

    def _print_Integer(self, expr):
        return f"{int(expr)}.0"

    def _print_Rational(self, expr):
        return f"({int(expr.p)}.0 / {int(expr.q)}.0)"

    def _print_Pow(self, expr, rational=False):
        if expr.exp.is_Integer and expr.exp < 0:
            return f"(1.0 / ({self.doprint(sympy.Pow(expr.base, -expr.exp))}))"
        if expr.exp == sympy.Rational(1, 2):
            return f"tl.sqrt({self.doprint(expr.base)})"
        if expr.exp == sympy.Rational(-1, 2):
            return f"(1.0 / tl.sqrt({self.doprint(expr.base)}))"
        return super()._print_Pow(expr, rational)


_FLOAT_PRINTER = _FloatPrinter()


def float_code(size: Size, tl_type: str) -> str:
    """A float computed from sizes as a Triton scalar of `tl_type`, evaluated in double."""
    if isinstance(size, int):
        return f"tl.full([], {size}.0, {tl_type})"
    return f"({_FLOAT_PRINTER.doprint(size)}).to({tl_type})"


def is_static(size: Size) -> bool:
    return isinstance(size, int)


def symbols_of(sizes) -> list[str]:
    """The symbol names in `sizes` (any nesting of lists), sorted."""
    out: set[str] = set()

    def visit(x):
        if isinstance(x, (list, tuple)):
            for y in x:
                visit(y)
        elif isinstance(x, sympy.Expr):
            out.update(str(s) for s in x.free_symbols)

    visit(sizes)
    return sorted(out)


def evaluate(size: Size, values: dict[str, int], as_float: bool = False) -> int | float:
    """The value of `size` at these symbol values: an int, or a float where the value is a float
    computed from sizes (which `int` would truncate: 1 / n is 0)."""
    if isinstance(size, int):
        return float(size) if as_float else size
    value = size.subs({symbol(k): v for k, v in values.items()})
    return float(value) if as_float else int(value)


def prod(sizes) -> Size:
    """The product of sizes: an int, or an expression when one is symbolic."""
    n = sympy.Integer(1)
    for s in sizes:
        n = n * s
    return _simplify(n)


def same(a: Size, b: Size) -> bool:
    """Two sizes equal for every value of the symbols (`s*s` and `s**2` alike)."""
    return prod([a]) == prod([b])


def cdiv(n: Size, block: int) -> Size:
    """ceil(n / block), as an expression when `n` is one."""
    if isinstance(n, int):
        return -(-n // block)
    return sympy.ceiling(n / block)


@contextlib.contextmanager
def ranges_of(func_op):
    """While compiling `func_op`'s module: its symbols' ranges (`RANGES`), for `bounds`. A guard
    keeps each call inside them (runtime/guards.py), as export's checks left them (a sliding-window
    cache's length below its window)."""
    ranges = {}
    if func_op is not None and RANGES in func_op.attributes:
        d = ir.DictAttr(func_op.attributes[RANGES])
        for name in [ir.StringAttr(a).value for a in ir.ArrayAttr(func_op.attributes["uniorch.size_range_names"])]:
            lo, hi = list(ir.DenseI64ArrayAttr(d[name]))
            ranges[name] = (lo, hi if hi >= 0 else None)
    relations = []
    if func_op is not None and RELATIONS in func_op.attributes:
        for text_ in [ir.StringAttr(a).value for a in ir.ArrayAttr(func_op.attributes[RELATIONS])]:
            lhs, op, rhs = _split_relation(text_)
            relations.append((op, parse(lhs), parse(rhs)))
    prev = getattr(_local, "ranges", None), getattr(_local, "relations", None)
    _local.ranges, _local.relations = ranges, relations
    try:
        yield ranges
    finally:
        _local.ranges, _local.relations = prev


def _split_relation(text_: str) -> tuple[str, str, str]:
    """"lhs op rhs" where the sides may hold spaces: split at the one comparison operator."""
    m = re.search(r" (<=|>=|==|!=|<|>) ", text_)
    if m is None:
        raise ValueError(f"not a size relation: {text_!r}")
    return text_[:m.start()], m.group(1), text_[m.end():]


def _known_order(a: Size, b: Size) -> bool:
    """a <= b by a relation the trace assumed and the guards check (`ranges_of`)."""
    for op, lhs, rhs in getattr(_local, "relations", None) or ():
        lo, hi = (lhs, rhs) if op in ("<=", "<") else (rhs, lhs) if op in (">=", ">") else (None, None)
        if lo is not None and sympy.expand(lo - a) == 0 and sympy.expand(hi - b) == 0:
            return True
    return False


def _ranged_bounds(size, ranges: dict):
    """`bounds` of a linear expression from its symbols' ranges, else None."""
    syms = sorted(size.free_symbols, key=str)
    try:
        p = sympy.Poly(sympy.expand(size), *syms)
    except sympy.PolynomialError:
        return None
    if p.total_degree() > 1:
        return None
    lo = hi = p.coeff_monomial(1)
    for s in syms:
        c = p.coeff_monomial(s)
        slo, shi = ranges.get(str(s), (2, None))
        shi = sympy.oo if shi is None else shi
        lo, hi = (lo + c * slo, hi + c * shi) if c > 0 else (lo + c * shi, hi + c * slo)
    return lo, hi


def bounds(size: Size) -> tuple:
    """(lowest, highest) value of a size over every value of its symbols (each at least 2, as the
    guards keep them: sizes 0 and 1 recompile, and within the ranges `ranges_of` gives); -inf/inf
    where unbounded or not known."""
    if isinstance(size, int) or size.is_number:
        return int(size), int(size)
    ranges = getattr(_local, "ranges", None)
    if ranges and any(str(s) in ranges for s in size.free_symbols):
        found = _ranged_bounds(size, ranges)
        if found is not None:
            return found
    t = {s: symbol(f"_t_{s}") + 2 for s in size.free_symbols}  # s = 2 + t, t >= 0
    e = sympy.expand(size.subs(t))
    if not e.is_polynomial():
        # floors and ceilings (a strided convolution's output length): exact at the symbols'
        # lowest values where the size only grows (or only shrinks) with them
        lows = {x: (ranges or {}).get(str(x), (2, None))[0] for x in size.free_symbols}
        least, most = _least(size, lows), _least(-size, lows)
        return (-sympy.oo if least is None else least), (sympy.oo if most is None else -most)
    const = e.as_coeff_Add()[0]
    coeffs = sympy.Poly(e - const).coeffs() if e != const else []
    if all(c >= 0 for c in coeffs):
        return int(const), sympy.oo
    if all(c <= 0 for c in coeffs):
        return -sympy.oo, int(const)
    return -sympy.oo, sympy.oo


def must_lt(a: Size, b: Size) -> bool:
    """a < b for every value of the symbols (False when it may not hold)."""
    return bool(bounds(_simplify(sympy.Integer(1) * a - b))[1] < 0)


def may_lt(a: Size, b: Size) -> bool:
    """a < b for some value of the symbols (True when it cannot be ruled out)."""
    return bool(bounds(_simplify(sympy.Integer(1) * a - b))[0] < 0)


def set_arg_dims(func_op, dims: list[list[Size]]) -> None:
    """Writes `uniorch.arg_dims` on a function: per tensor argument, per dim, "" static (its type
    says) or the expression; per scalar argument that is a size, its value or expression (a slice
    offset that is 0 at every length is still an argument)."""
    inputs = ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value).inputs
    typed = [list(ir.ShapedType(t).shape) if isinstance(t, ir.ShapedType) else None for t in inputs]
    typed += [[]] * max(0, len(dims) - len(inputs))

    def entry(s, shape, d: int) -> str:
        # "" only where the type holds the size: a reshape's result can be `?` where the size is
        # a number (its shape came from a tensor of sizes), and "" would read as that `?`
        in_type = shape is not None and (d >= len(shape) or shape[d] >= 0)
        return "" if is_static(s) and in_type else text(s)

    with func_op.context:
        func_op.attributes[ARG_DIMS] = ir.ArrayAttr.get([
            ir.ArrayAttr.get([ir.StringAttr.get(entry(s, shape, d)) for d, s in enumerate(ds)])
            for ds, shape in zip(dims, typed)])


def hints(func_op) -> dict[str, int]:
    """`uniorch.size_hints` of a function: each symbol's size in the capture's call."""
    if "uniorch.size_hints" not in func_op.attributes:
        return {}
    attr = ir.DictAttr(func_op.attributes["uniorch.size_hints"])
    return {a.name: ir.IntegerAttr(a.attr).value for a in attr}


def hinted(size: Size, values: dict[str, int]) -> int:
    """A size at the hint values (schedules are tuned for them): 64 for a symbol without one."""
    if isinstance(size, int):
        return size
    return int(size.subs({s: values.get(str(s), 64) for s in size.free_symbols}))


def grid_entry(n: Size):
    """A grid entry as a schedule stores it: an int, or the expression's text."""
    return n if isinstance(n, int) else text(n)


def record_symbols(module: ir.Module, graph) -> None:
    """`uniorch.arg_dims` and `uniorch.size_hints` on `@main` when the FX graph it was imported
    from has symbolic sizes: each argument's dims as symbols, and the sizes of the capture's call
    (schedules are tuned for them; kernels stay correct for every size)."""
    import torch

    found: dict[str, int] = {}
    limited: dict[str, tuple[int, int]] = {}
    envs = []

    def size(s):
        if not isinstance(s, torch.SymInt):
            return int(s)
        expr = s.node.expr
        if expr.is_number:
            return int(expr)
        env = s.node.shape_env
        envs[:] = [env]
        values = getattr(env, "backed_var_to_val", None)  # torch >= 2.12; var_to_val before
        values = env.var_to_val if values is None else values
        for sym in expr.free_symbols:
            if sym in values:
                found[str(sym)] = int(values[sym])
            vr = env.var_to_range.get(sym)
            bounded = vr is not None and getattr(vr.upper, "is_Integer", False)
            if bounded or vr is not None and getattr(vr.lower, "is_Integer", False) and int(vr.lower) > 2:
                # -1: no upper bound (`x[:, -3:]` leaves a length of at least 3)
                limited[str(sym)] = (max(2, int(vr.lower)), int(vr.upper) if bounded else -1)
        return parse(str(expr))

    arg_dims = []
    for n in graph.nodes:
        if n.op != "placeholder":
            continue
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            arg_dims.append([size(s) for s in val.shape])
        elif isinstance(val, torch.SymInt):
            try:
                arg_dims.append([size(val)])
            except ValueError:  # an int computed from a value (`int(x.sum().item()) % 3`): not a size
                arg_dims.append([])
        else:
            arg_dims.append([])
    if not found:
        return
    main = next(op.operation for op in module.body.operations
                if op.operation.name == "func.func" and ir.StringAttr(op.operation.attributes["sym_name"]).value == "main")
    set_arg_dims(main, arg_dims)
    with module.context:
        main.attributes["uniorch.size_hints"] = ir.DictAttr.get(
            {k: ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v) for k, v in sorted(found.items())})
        if limited:
            main.attributes[RANGES] = ir.DictAttr.get(
                {k: ir.DenseI64ArrayAttr.get(list(v)) for k, v in limited.items()})
            main.attributes["uniorch.size_range_names"] = ir.ArrayAttr.get([ir.StringAttr.get(k) for k in limited])
        relations = _relations(envs[0], set(found)) if envs else []
        if relations:  # what the trace assumed of the symbols and the guards check (x[:n] with n <= rows)
            main.attributes[RELATIONS] = ir.ArrayAttr.get([ir.StringAttr.get(" ".join(r)) for r in relations])


def _relations(env, symbols: set[str]) -> list[tuple[str, str, str]]:
    """The guards relating `symbols` as (lhs, op, rhs) texts (runtime/size_guards.py)."""
    from ..runtime.size_guards import of_shape_env

    try:
        kept, _ = of_shape_env(env, symbols)
    except Exception:  # noqa: BLE001 - a hint for min/max only: without it they stay undecided
        return []
    return [(lhs, op, rhs) for op, lhs, rhs in kept]


def arg_symbols(func_op) -> list[str]:
    """Every symbol a function's `uniorch.arg_dims` mentions (its tensors' dims and the sizes its
    scalar arguments carry), sorted."""
    if ARG_DIMS not in func_op.attributes:
        return []
    texts = [ir.StringAttr(x).value for a in ir.ArrayAttr(func_op.attributes[ARG_DIMS]) for x in ir.ArrayAttr(a)]
    return symbols_of([parse(t) for t in texts if t])


def kernel_symbols(func_op, shapes) -> list[str]:
    """A kernel's size parameters: every symbol in its tensors' `shapes` or its `uniorch.arg_dims`
    (a size it reads only through a scalar argument), sorted."""
    return sorted(set(symbols_of(shapes)) | set(arg_symbols(func_op)))


def known_shape(value: ir.Value) -> list[Size]:
    """`shape(value)` for a ranked tensor, static dims read off the type without deriving anything."""
    static = list(ir.RankedTensorType(value.type).shape)
    return static if all(s >= 0 for s in static) else shape(value)


def has_symbols(func_op) -> bool:
    return ARG_DIMS in func_op.attributes


def _static_shape(t) -> list[int]:
    return list(ir.RankedTensorType(t).shape) if isinstance(t, ir.RankedTensorType) else []


def shape(value: ir.Value) -> list[Size]:
    """The dims of a ranked tensor value: ints where its type is static, else expressions."""
    t = value.type
    if not isinstance(t, ir.RankedTensorType):
        raise UnknownSize(f"not a ranked tensor: {t}")
    static = list(ir.RankedTensorType(t).shape)
    if all(s >= 0 for s in static):
        return static
    derived = _derived(value)
    return [s if s >= 0 else derived[d] for d, s in enumerate(static)]


def _derived(value: ir.Value) -> list[Size]:
    owner = value.owner
    if isinstance(owner, ir.Block):
        return _arg_dims(value)
    op = owner.operation if hasattr(owner, "operation") else owner
    r = next(i for i, res in enumerate(op.results) if res == value)
    return _op_result_dims(op, r)


def _arg_dims(value: ir.Value) -> list[Size]:
    block = value.owner
    func = block.owner
    func = func.operation if hasattr(func, "operation") else func
    if func is None or ARG_DIMS not in func.attributes:
        raise UnknownSize("a block argument of a function without uniorch.arg_dims")
    entries = ir.ArrayAttr(func.attributes[ARG_DIMS])
    argno = value.arg_number
    if argno >= len(entries):
        raise UnknownSize(f"argument {argno} has no uniorch.arg_dims entry")
    texts = [ir.StringAttr(a).value for a in ir.ArrayAttr(entries[argno])]
    static = _static_shape(value.type)
    return [parse(x) if x else static[d] for d, x in enumerate(texts)]


def _const_int(v: ir.Value) -> int:
    owner = v.owner
    if isinstance(owner, ir.Block) or owner.name != "arith.constant":
        raise UnknownSize("a dim index that is not a constant")
    return ir.IntegerAttr(owner.attributes["value"]).value


def _op_result_dims(op, r: int) -> list[Size]:
    name = op.name
    static = _static_shape(op.results[r].type)
    if name == "tensor.empty":
        dyn = iter(op.operands)
        return [s if s >= 0 else index_value(next(dyn)) for s in static]
    if name.startswith("linalg.") or name in ("tm_tensor.scan", "tm_tensor.scatter", "tm_tensor.sort",
                                              "tm_tensor.topk"):
        outs = list(op.operands)[len(op.operands) - len(op.results):]
        return shape(outs[r])
    if name == "tensor.concat":
        dim = ir.IntegerAttr(op.attributes["dim"]).value
        parts = [shape(v) for v in op.operands]
        out = list(parts[0])
        out[dim] = _simplify(sum((p[dim] for p in parts), sympy.Integer(0)))
        return [s if s >= 0 else out[d] for d, s in enumerate(static)]
    if name == "tensor.extract_slice":
        dyn = slice_operands(op)["sizes"]
        it = iter(dyn)
        return [s if s >= 0 else next(it) for s in static]
    if name == "tensor.pad":
        src, amounts = shape(op.operands[0]), pad_amounts(op)
        out = [_simplify(sympy.Integer(0) + s + lo + hi) for s, lo, hi in zip(src, amounts["low"], amounts["high"])]
        return [s if s >= 0 else out[d] for d, s in enumerate(static)]
    if name == "tensor.insert_slice":
        dest = shape(op.operands[1])
        return [s if s >= 0 else dest[d] for d, s in enumerate(static)]
    if name == "tensor.cast":
        src = shape(op.operands[0])
        return [s if s >= 0 else src[d] for d, s in enumerate(static)]
    if name == "tensor.collapse_shape":
        src = shape(op.operands[0])
        groups = [[ir.IntegerAttr(i).value for i in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes["reassociation"])]
        out = []
        for g in groups:
            n = sympy.Integer(1)
            for d in g:
                n = n * src[d]
            out.append(_simplify(n))
        return out
    if name == "tensor.expand_shape":
        dyn = iter(list(op.operands)[1:])
        return [s if s >= 0 else index_value(next(dyn)) for s in static]
    if name == "tensor.reshape":
        shp = op.operands[1].owner
        if isinstance(shp, ir.Block) or shp.name != "tensor.from_elements":
            raise UnknownSize("tensor.reshape to a shape that is not built from elements")
        return [s if s >= 0 else index_value(v) for s, v in zip(static, shp.operands)]
    if name == "func.call":  # an outlined kernel: its result's dims, over the same symbols
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        module = op.parent.parent
        for f in module.regions[0].blocks[0].operations:
            f = f.operation
            if f.name == "func.func" and ir.StringAttr(f.attributes["sym_name"]).value == callee:
                ret = list(f.regions[0].blocks[0].operations)[-1]
                return shape(ret.operands[r])
        raise UnknownSize(f"callee @{callee} not found")
    raise UnknownSize(f"no rule derives the sizes of '{name}'")


_DYNAMIC = -(2 ** 63)


def slice_operands(op) -> dict[str, list[Size]]:
    """An extract/insert_slice's offsets, sizes and strides (static entries and the operands that
    fill its dynamic ones), as sizes; for "sizes", only the dynamic entries, in order."""
    n_src = 1 if op.name == "tensor.extract_slice" else 2
    dyn = iter(list(op.operands)[n_src:])
    out = {}
    for key, attr in (("offsets", "static_offsets"), ("sizes", "static_sizes"), ("strides", "static_strides")):
        vals = list(ir.DenseI64ArrayAttr(op.attributes[attr]))
        full = [index_value(next(dyn)) if v == _DYNAMIC else v for v in vals]
        out[key] = [f for f, v in zip(full, vals) if v == _DYNAMIC] if key == "sizes" else full
        if key == "sizes":
            out["all_sizes"] = full
    return out


def pad_amounts(op) -> dict[str, list[Size]]:
    """A tensor.pad's low and high amounts per dim, static entries and the operands that fill its
    dynamic ones, as sizes."""
    dyn = iter(list(op.operands)[1:])
    out = {}
    for key, attr in (("low", "static_low"), ("high", "static_high")):
        vals = list(ir.DenseI64ArrayAttr(op.attributes[attr]))
        out[key] = [index_value(next(dyn)) if v == _DYNAMIC else v for v in vals]
    return out


def _simplify(e) -> Size:
    e = sympy.expand(e)
    if e.has(sympy.floor):
        e = sympy.expand(e.replace(lambda x: isinstance(x, sympy.floor), _flat_floor))
    return int(e) if e.is_number else e


def _flat_floor(f):
    """floor((floor(y) + k) / b) as floor((y + k) / b), for integers k and b > 0: strided
    convolutions one after another give floor(floor(floor(s/5)/2)/2), which is floor(s/20), and
    only the flat form cancels against the sizes computed from it."""
    num, den = sympy.fraction(sympy.together(f.args[0]))
    if not (den.is_Integer and den > 0):
        return f
    inner = [a for a in sympy.Add.make_args(sympy.expand(num)) if isinstance(a, sympy.floor)]
    rest = sympy.expand(num) - sum(inner)
    if len(inner) != 1 or not rest.is_Integer:
        return f
    return sympy.floor((inner[0].args[0] + rest) / den)


_BINARY = {"arith.muli": lambda a, b: a * b, "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b}


def index_value(v: ir.Value) -> Size:
    """An `index` or integer SSA value as an expression over the size symbols."""
    owner = v.owner
    if isinstance(owner, ir.Block):
        func = owner.owner
        func = func.operation if hasattr(func, "operation") else func
        if func is not None and ARG_DIMS in func.attributes:
            texts = [ir.StringAttr(a).value for a in ir.ArrayAttr(ir.ArrayAttr(func.attributes[ARG_DIMS])[v.arg_number])]
            if len(texts) == 1 and texts[0]:
                return parse(texts[0])
        raise UnknownSize("an index argument without a size")
    name = owner.name
    if name == "arith.constant":
        attr = owner.attributes["value"]
        if isinstance(attr, ir.FloatAttr):
            v = ir.FloatAttr(attr).value
            if not math.isfinite(v):
                raise UnknownSize(f"a size computed from the constant {v}")
            # a float computed from sizes (label smoothing's 0.1 / n): the constant's exact value
            return int(v) if v == int(v) else sympy.Rational(v)
        return ir.IntegerAttr(attr).value
    if name == "tensor.dim":
        return shape(owner.operands[0])[_const_int(owner.operands[1])]
    if name in ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui", "arith.trunci",
                "arith.sitofp", "arith.uitofp", "arith.extf", "arith.truncf"):
        return index_value(owner.operands[0])
    if name in ("arith.fptosi", "arith.fptoui", "math.ceil", "math.floor"):  # arange's length, in floats
        x = sympy.Integer(1) * index_value(owner.operands[0])
        if not x.is_integer:
            x = sympy.ceiling(x) if name == "math.ceil" else sympy.floor(x)
        return _simplify(x)
    if name == "math.sqrt":  # a size's square root (attention's scale, n ** -0.5)
        return sympy.sqrt(index_value(owner.operands[0]))
    if name in ("arith.divf",):
        q = sympy.cancel(sympy.Integer(1) * index_value(owner.operands[0]) / index_value(owner.operands[1]))
        return _simplify(q) if q.is_integer else q
    if name in ("arith.addf", "arith.subf", "arith.mulf"):
        f = {"arith.addf": _BINARY["arith.addi"], "arith.subf": _BINARY["arith.subi"], "arith.mulf": _BINARY["arith.muli"]}[name]
        return _simplify(f(index_value(owner.operands[0]), index_value(owner.operands[1])))
    if name in _BINARY:
        return _simplify(_BINARY[name](index_value(owner.operands[0]), index_value(owner.operands[1])))
    if name in ("arith.divsi", "arith.divui", "arith.floordivsi", "arith.ceildivsi"):
        a, b = index_value(owner.operands[0]), index_value(owner.operands[1])
        q = sympy.cancel(sympy.Integer(1) * a / b)
        if q.is_integer:
            return _simplify(q)
        if isinstance(b, int) and b > 0:
            # sizes are not negative, so C's truncating division is the floor too: a tile count,
            # cdiv(rows, block) written (rows + block - 1) // block
            return sympy.ceiling(q) if name == "arith.ceildivsi" else sympy.floor(q)
        raise UnknownSize(f"{name} of {a} by {b} is not exact")
    if name == "affine.apply":
        m = ir.AffineMapAttr(owner.attributes["map"]).value
        vals = [index_value(o) for o in owner.operands]
        return _simplify(_affine(m.results[0], vals[: m.n_dims], vals[m.n_dims:]))
    if name == "arith.select":
        return index_value(owner.operands[1] if decide(owner.operands[0]) else owner.operands[2])
    if name in ("arith.minsi", "arith.maxsi", "arith.minui", "arith.maxui"):
        return _min_max(name, index_value(owner.operands[0]), index_value(owner.operands[1]))
    raise UnknownSize(f"no rule evaluates '{name}' on sizes")


_TO_THE_END = 2 ** 62  # slice ends at or past this mean "to the end" (PyTorch writes INT64_MAX)


def _min_max(name: str, a: Size, b: Size) -> Size:
    """min/max of two sizes where the order holds for every value of the symbols: a slice's end
    clamped to the dim (`min(end, size)`, end often INT64_MAX), a window clamped to the length."""
    smaller = None
    if a == b:
        smaller = a
    elif isinstance(a, int) and a >= _TO_THE_END:
        smaller = b
    elif isinstance(b, int) and b >= _TO_THE_END:
        smaller = a
    elif must_lt(a, sympy.Integer(1) * b + 1):
        smaller = a
    elif must_lt(b, sympy.Integer(1) * a + 1):
        smaller = b
    elif _known_order(a, b):
        smaller = a
    elif _known_order(b, a):
        smaller = b
    if smaller is None and not (isinstance(a, int) and isinstance(b, int)):
        diff = _simplify(sympy.Integer(1) * b - a)
        lo, hi = bounds(diff)
        smaller = a if lo >= 0 else b if hi <= 0 else None
    if smaller is None:
        raise UnknownSize(f"{name} of {a} and {b}: their order depends on the sizes")
    if name.startswith("arith.min"):
        return smaller
    return b if smaller is a else a


def _affine(e, dims: list, syms: list):
    if isinstance(e, ir.AffineDimExpr):
        return dims[e.position]
    if isinstance(e, ir.AffineSymbolExpr):
        return syms[e.position]
    if isinstance(e, ir.AffineConstantExpr):
        return sympy.Integer(e.value)
    a, b = _affine(e.lhs, dims, syms), _affine(e.rhs, dims, syms)
    if isinstance(e, ir.AffineAddExpr):
        return a + b
    if isinstance(e, ir.AffineMulExpr):
        return a * b
    q = sympy.cancel(sympy.Integer(1) * a / b)
    if isinstance(e, (ir.AffineFloorDivExpr, ir.AffineCeilDivExpr)) and q.is_integer:
        return q
    raise UnknownSize(f"affine expression {e} of sizes")


_PREDICATES = {0: "eq", 1: "ne", 2: "slt", 3: "sle", 4: "sgt", 5: "sge", 6: "ult", 7: "ule", 8: "ugt", 9: "uge"}


def decide(cond: ir.Value) -> bool:
    """An `arith.cmpi` of sizes, decided for every value of the symbols (2 and up), or UnknownSize."""
    owner = cond.owner
    if isinstance(owner, ir.Block) or owner.name != "arith.cmpi":
        if not isinstance(owner, ir.Block) and owner.name == "arith.constant":
            return bool(ir.IntegerAttr(owner.attributes["value"]).value)
        raise UnknownSize("a condition that is not a comparison of sizes")
    pred = _PREDICATES[ir.IntegerAttr(owner.attributes["predicate"]).value]
    raw = sympy.expand(index_value(owner.operands[0]) - index_value(owner.operands[1]))
    got = _decided(pred, raw, 2)
    if got is None:
        # the symbols' own lower bounds, where the trace bounded them: a 3x3 convolution's input
        # is 3 and up, so its output's (s - 2) * (t - 2) cells are not negative
        ranges = getattr(_local, "ranges", None) or {}
        low = {x: ranges.get(str(x), (2, None))[0] for x in raw.free_symbols}
        if any(lo > 2 for lo in low.values()):
            got = _decided(pred, raw, low)
    if got is None:
        raise UnknownSize(f"cannot decide {pred} on sizes differing by {raw}")
    return bool(got)


def _decided(pred: str, diff, low):
    """The comparison's truth for every value of the symbols from `low` up (one bound for all, or
    per symbol), or None: s = u + low - 1 with u positive."""
    lows = tuple(sorted(((x, low if isinstance(low, int) else low[x]) for x in diff.free_symbols),
                        key=lambda kv: str(kv[0])))
    return _decided_at(pred, diff, lows)


@functools.lru_cache(maxsize=8192)
def _decided_at(pred: str, diff, low_items: tuple):
    lows = dict(low_items)
    shifted = sympy.expand(diff.subs({x: x + lo - 1 for x, lo in lows.items()}, simultaneous=True))
    neg, nonpos = shifted.is_negative, shifted.is_nonpositive
    pos, nonneg = shifted.is_positive, shifted.is_nonnegative
    if None in (neg, pos, nonneg, nonpos) and (shifted.has(sympy.floor) or shifted.has(sympy.ceiling)):
        least = _least(diff, lows)  # a conv's output length, floor((s - 10) / 5) + 1, from s >= 10
        if least is not None and least > 0:
            neg, nonpos, pos, nonneg = False, False, True, True
        elif least is not None and least == 0:
            neg, nonneg = False, True
    zero = shifted.is_zero
    if zero is None and (pos or neg):
        zero = False
    facts = {"eq": zero, "ne": None if zero is None else not zero,
             "slt": neg, "ult": neg, "sle": nonpos, "ule": nonpos,
             "sgt": pos, "ugt": pos, "sge": nonneg, "uge": nonneg}
    return facts[pred]


def _least(diff, lows: dict):
    """diff's smallest value over the symbols from their `lows` up, where diff does not decrease
    as any symbol grows (floor and ceiling of such expressions included: they keep the order);
    None otherwise. Memoized: codegen asks for the bounds of the same sizes many times."""
    return _least_of(diff, tuple(sorted(lows.items(), key=lambda kv: str(kv[0]))))


@functools.lru_cache(maxsize=8192)
def _least_of(diff, low_items: tuple):
    lows = dict(low_items)
    t = {x: symbol(f"_t_{x}") for x in lows}
    smooth = diff.replace(lambda e: isinstance(e, (sympy.floor, sympy.ceiling)), lambda e: e.args[0])
    poly = sympy.expand(smooth.subs({x: t[x] + lo for x, lo in lows.items()}, simultaneous=True))
    try:
        coeffs = sympy.Poly(poly, *t.values()).coeffs() if poly.free_symbols else []
    except sympy.PolynomialError:
        return None
    const = poly.subs({v: 0 for v in t.values()})
    if any(c < 0 for c, m in zip(coeffs, sympy.Poly(poly, *t.values()).monoms() if poly.free_symbols else [])
           if any(m)) or not const.is_number:
        return None
    value = diff.subs(lows)
    return int(value) if value.is_number else None
