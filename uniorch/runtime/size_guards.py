"""Relations between size symbols that a symbolic capture assumed, checked at every call.

Tracing `x[:n]` with n = 4 and x of 12 rows decides that the slice keeps n rows, and export notes
the guard `n <= rows(x)`; the graph computes n rows from then on. Export's range constraints keep
only each symbol's own bounds, so a call with n = 13 passed the symbolic guard and got 12 rows
where eager gives 13 (a wrong result, not an error). Such guards (two or more symbols, a modulus,
a floor division) are kept per capture as `(op, lhs, rhs)` texts over the size symbols, evaluated
as Python for the symbols a call binds; bundles store the same texts. A guard uniorch cannot read
(an `Or`, a function it does not know) makes the symbolic compile refuse to serve at all.
"""
from __future__ import annotations

import operator
from typing import Optional

import sympy

_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt, "==": operator.eq,
        "!=": operator.ne}
_RELATIONS = {sympy.LessThan: "<=", sympy.StrictLessThan: "<", sympy.GreaterThan: ">=",
              sympy.StrictGreaterThan: ">", sympy.Equality: "==", sympy.Unequality: "!="}


def of_exported(ep, symbols: set[str]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(the guards over `symbols` beyond each one's range, the guards that cannot be kept)."""
    from torch.export.exported_program import _get_shape_env

    return of_shape_env(_get_shape_env(ep.graph_module), symbols)


def of_shape_env(shape_env, symbols: set[str]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """`of_exported` from a shape environment (a traced value's SymInt holds it)."""
    from ..ir import dims

    kept, unread = [], []
    for guard in getattr(shape_env, "guards", ()):
        expr = _from_torch(guard.expr)
        if expr is sympy.true:  # decided once written in sympy's functions
            continue
        names = {str(s) for s in expr.free_symbols}
        if not names or not names <= symbols:  # weights' sizes, data-dependent counts: checked in the graph
            continue
        for rel in (expr.args if isinstance(expr, sympy.And) else (expr,)):
            if _a_range(rel) and _implied(rel, shape_env):
                continue
            op = _RELATIONS.get(type(rel))
            entry = (op, str(rel.lhs), str(rel.rhs)) if op else None
            if entry is None or not _readable(entry):
                unread.append(str(rel))
            elif entry not in kept:
                kept.append(entry)
    return kept, unread


def _from_torch(expr):
    """A shape environment's expression in the functions `dims.parse` reads: PyTorch writes its own
    (`PythonMod(-s0, 4)`, `FloorDiv(s0, 2)`, `CeilToInt(...)`), with the same integer meaning as
    sympy's Mod (the divisor's sign), floor and ceiling. A function with no such form is left as it
    is, and `dims.parse` refuses its text."""
    from torch.utils._sympy import functions as tf

    rules = [(tf.PythonMod, sympy.Mod), (tf.Mod, sympy.Mod), (tf.FloorDiv, lambda a, b: sympy.floor(a / b)),
             (tf.CeilDiv, lambda a, b: sympy.ceiling(a / b)), (tf.CleanDiv, lambda a, b: a / b),
             (tf.IntTrueDiv, lambda a, b: a / b), (tf.FloorToInt, sympy.floor), (tf.CeilToInt, sympy.ceiling),
             (tf.Max, sympy.Max), (tf.Min, sympy.Min), (tf.PowByNatural, sympy.Pow)]
    if not isinstance(expr, sympy.Basic):
        return expr
    for fn, to in rules:
        expr = expr.replace(lambda e, fn=fn: isinstance(e, fn), lambda e, to=to: to(*e.args))
    return int(expr) if expr.is_number else expr


def _a_range(rel) -> bool:
    """A bound of one symbol by a number (`s0 >= 2`), which the symbol's range may hold. Not
    `s0 != 3` (a branch on `n == 3` traced at another n), which no range can say."""
    sides = getattr(rel, "args", ())
    if _RELATIONS.get(type(rel)) not in ("<=", "<", ">=", ">"):
        return False
    return (len(rel.free_symbols) == 1 and len(sides) == 2
            and any(isinstance(s, sympy.Symbol) for s in sides) and any(s.is_number for s in sides))


def _implied(rel, shape_env) -> bool:
    """Whether a symbol's own range (what the guard checks per symbol) already keeps the bound: not
    always, `min(n, 6)` traced at n = 9 guards `6 <= n` and left n's range at 2 and up."""
    (sym,) = rel.free_symbols
    vr = getattr(shape_env, "var_to_range", {}).get(sym)
    if vr is None or not getattr(vr.lower, "is_Integer", False):
        return False
    hi = int(vr.upper) if getattr(vr.upper, "is_Integer", False) else 2 ** 62
    return all(bool(rel.subs(sym, v)) for v in (int(vr.lower), hi))


def _readable(entry) -> bool:
    from ..ir import dims

    try:
        for side in entry[1:]:
            dims.parse(side)
    except ValueError:
        return False
    return True


class SizeGuards:
    """The kept guards as Python functions of the symbols (compiled once: one check per call)."""

    def __init__(self, entries: list):
        from ..ir import dims

        self.entries = [tuple(e) for e in entries]
        self._checks = []
        for op, lhs, rhs in self.entries:
            left, right = dims.parse(lhs), dims.parse(rhs)
            names = sorted({str(s) for side in (left, right) if not isinstance(side, int) for s in side.free_symbols})
            args = [dims.symbol(n) for n in names]
            fns = [sympy.lambdify(args, side, modules="math") for side in (left, right)]
            self._checks.append((names, _OPS[op], fns, f"{lhs} {op} {rhs}"))

    def failed(self, bound: dict, where: Optional[dict] = None) -> Optional[str]:
        """The first guard the symbol values `bound` break (or cannot decide), else None; `where`
        names the input each symbol is read from."""
        for names, op, (left, right), text in self._checks:
            try:
                values = [bound[n] for n in names]
            except KeyError:
                return f"the size guard {text} is not determined by the inputs"
            if not op(left(*values), right(*values)):
                said = [f"{n} = {bound[n]}" + (f" ({where[n]})" if where and n in where else "") for n in names]
                return f"the size guard {text} does not hold: {', '.join(said)}"
        return None
