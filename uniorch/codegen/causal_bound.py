"""Where a flash kernel's key loop may stop: the causal bound, proved on the kernel's own code.

A causal mask makes every score of key j > i + c minus infinity, so the key tiles past the
diagonal add nothing to a query tile's softmax; FlashAttention and PyTorch's fused kernels skip
them, halving the work at equal lengths. uniorch's attention kernels are generated from fused
linalg, in which the mask is ordinary arithmetic (SDPA's `is_causal` arrives as
`scores + where(j - i <= c, 0, -inf)`), so the bound is proved rather than assumed: the score lines
the kernel executes are evaluated over an abstract domain (index expressions affine in the query
index i and key index j, predicates over them, values masked to -inf where a predicate fails).
Only when the final score is provably -inf wherever `j - i > c` does the loop stop at
`min(keys, last query of the tile + c + 1)`. Anything the domain does not model (a load, a
function of the score, an index that is neither) proves nothing, and the loop runs over every key.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class _Affine:  # a*i + b*j + c, integers
    a: int
    b: int
    c: int


@dataclass(frozen=True)
class _Pred:  # a*i + b*j + c <= 0
    a: int
    b: int
    c: int


@dataclass(frozen=True)
class _Const:
    value: float


class _Finite:  # the scores before masking: any value (never assumed -inf)
    pass


@dataclass(frozen=True)
class _Masked:  # -inf wherever `pred` fails; anything where it holds
    pred: _Pred


@dataclass(frozen=True)
class _Zeroed:  # 0 wherever `pred` fails (exp of a masked score, a gradient masked to 0)
    pred: _Pred


_FINITE = _Finite()


def _pred(x: _Affine, op, y: _Affine) -> Optional[_Pred]:
    """x op y as one `<= 0` predicate over integers."""
    d = _Affine(x.a - y.a, x.b - y.b, x.c - y.c)
    if isinstance(op, ast.LtE):
        return _Pred(d.a, d.b, d.c)
    if isinstance(op, ast.Lt):
        return _Pred(d.a, d.b, d.c + 1)
    if isinstance(op, ast.GtE):
        return _Pred(-d.a, -d.b, -d.c)
    if isinstance(op, ast.Gt):
        return _Pred(-d.a, -d.b, -d.c + 1)
    return None


def _not(p: _Pred) -> _Pred:
    """not (a*i + b*j + c <= 0), over integers: -a*i - b*j - c + 1 <= 0."""
    return _Pred(-p.a, -p.b, 1 - p.c)


def _affine(v) -> Optional[_Affine]:
    if isinstance(v, _Affine):
        return v
    if isinstance(v, _Const) and float(v.value).is_integer():
        return _Affine(0, 0, int(v.value))
    return None


def _is_load(node) -> bool:
    """`tl.load(...)`, possibly indexed (`[:, None]`) or reshaped."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return isinstance(node, ast.Call) and ast.unparse(node.func) == "tl.load"


class _Eval:
    def __init__(self, env: dict, loads_finite: bool = False):
        self.env = env
        self.loads_finite = loads_finite

    def expr(self, node):
        if isinstance(node, ast.Name):
            return self.env.get(node.id)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return _Const(float(node.value))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float" \
                and len(node.args) == 1 and isinstance(node.args[0], ast.Constant) and node.args[0].value == "-inf":
            return _Const(-math.inf)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self.expr(node.operand)
            if isinstance(v, _Const):
                return _Const(-v.value)
            a = _affine(v)
            return _Affine(-a.a, -a.b, -a.c) if a else None
        if self.loads_finite and _is_load(node):
            return _FINITE
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "tl.exp" and len(node.args) == 1:
            v = self.expr(node.args[0])
            return _Zeroed(v.pred) if isinstance(v, _Masked) else _FINITE if isinstance(v, _Finite) else None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to" \
                and len(node.args) == 1:
            v = self.expr(node.func.value)
            target = ast.unparse(node.args[0])
            if isinstance(v, _Affine) and target in ("tl.int64", "tl.int32"):
                return v  # index values far inside either range
            if isinstance(v, (_Finite, _Masked, _Zeroed)) and target in ("tl.float32", "tl.float16", "tl.bfloat16",
                                                                        "tl.float64"):
                return v  # -inf stays -inf, and 0 stays 0, in every float type
            return None
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "tl.where" and len(node.args) == 3:
            cond, x, y = (self.expr(a) for a in node.args)
            if isinstance(cond, _Pred) and isinstance(y, _Const) and y.value == -math.inf \
                    and isinstance(x, (_Const, _Finite)) and not (isinstance(x, _Const) and x.value == -math.inf):
                return _Masked(cond)
            if isinstance(cond, _Pred) and isinstance(x, _Const) and x.value == -math.inf \
                    and isinstance(y, (_Const, _Finite)) and not (isinstance(y, _Const) and y.value == -math.inf):
                return _Masked(_not(cond))  # masked_fill(mask, -inf): -inf where cond holds
            if isinstance(cond, _Pred) and isinstance(y, _Const) and y.value == 0.0:
                return _Zeroed(cond)  # x where cond holds, 0 where it fails
            if isinstance(cond, _Pred) and isinstance(x, _Const) and x.value == 0.0:
                return _Zeroed(_not(cond))  # 0 where cond holds
            return None
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            x, y = _affine(self.expr(node.left)), _affine(self.expr(node.comparators[0]))
            return _pred(x, node.ops[0], y) if x and y else None
        if isinstance(node, ast.BinOp):
            x, y = self.expr(node.left), self.expr(node.right)
            if isinstance(node.op, (ast.Add, ast.Sub)):
                sign = 1 if isinstance(node.op, ast.Add) else -1
                ax, ay = _affine(x), _affine(y)
                if ax and ay:
                    return _Affine(ax.a + sign * ay.a, ax.b + sign * ay.b, ax.c + sign * ay.c)
                if isinstance(node.op, ast.Add):
                    # finite + (0 where pred, -inf elsewhere): -inf where pred fails
                    for u, w in ((x, y), (y, x)):
                        if isinstance(u, _Finite) and isinstance(w, _Masked):
                            return w
                if isinstance(x, _Finite) and isinstance(y, _Const) and math.isfinite(y.value):
                    return _FINITE
                if isinstance(x, _Masked) and (isinstance(y, _Finite)
                                               or isinstance(y, _Const) and math.isfinite(y.value)):
                    return x  # -inf minus (or plus) a finite value
                if isinstance(x, _Finite) and isinstance(y, _Finite):
                    return _FINITE
                return None
            if isinstance(node.op, (ast.Mult, ast.Div)):
                if isinstance(x, _Finite) and isinstance(y, _Const) and math.isfinite(y.value) and y.value > 0:
                    return _FINITE  # a positive finite scale keeps -inf where it was, adds none
                if isinstance(x, _Masked) and isinstance(y, _Const) and math.isfinite(y.value) and y.value > 0:
                    return x
                if isinstance(node.op, ast.Mult):
                    for u, w in ((x, y), (y, x)):
                        if isinstance(u, _Zeroed) and (isinstance(w, (_Finite, _Zeroed)) or isinstance(w, _Const)
                                                       and math.isfinite(w.value)):
                            return u  # 0 times a finite value
                    if isinstance(x, _Finite) and isinstance(y, _Finite):
                        return _FINITE
                elif isinstance(x, _Zeroed) and isinstance(y, _Const) and math.isfinite(y.value) and y.value != 0:
                    return x
                return None
        return None


def causal_offset(lines: list[str], query: str, key: str, score: str, result: str = "s") -> Optional[int]:
    """c such that the kernel's score `result` is -inf wherever key - query > c, proved from
    `lines` (straight-line Python assignments), with `query`/`key` the names holding the query and
    key indices and `score` the name of q·kᵀ's accumulator; None when it cannot be proved."""
    band = _band(lines, query, key, (score,), result, _Masked, loads_finite=False)
    return band[1] if band is not None and band[0] == "stop" else None


def band_predicates(lines: list[str], query: str, key: str, score: str, c: int) -> Optional[dict]:
    """{name: value} for the names `lines` define as predicates decided wherever key - query <= c:
    on a key tile wholly on that side of the diagonal (every key at most the tile's first query
    + c) each is true everywhere or false everywhere, so the tile's scores need no mask
    (codegen/attention.py computes such tiles in a loop of their own with these set). None where
    `lines` are not straight-line assignments the domain reads."""
    held: dict = {}

    def decide(name, v):
        if not isinstance(v, _Pred) or v.a != -v.b or v.b == 0:
            return
        if v.b > 0 and c <= (-v.c) // v.b:  # j - i <= floor(-k / b): implied by j - i <= c
            held[name] = True
        elif v.b < 0 and c < -((-v.c) // -v.b):  # j - i >= ceil(k / |b|): never, where j - i <= c
            held[name] = False

    env = _evaluate(lines, query, key, (score,), loads_finite=False, each=decide)
    return None if env is None else held


def zero_band(lines: list[str], row: str, col: str, accumulators: tuple, result: str = "s"):
    """For a chain's hidden activation (codegen/attention.py, chain mode) that is 0 outside a
    causal band: ("stop", c) when it is 0 wherever col - row > c (the hidden loop may end at the
    tile's last row + c + 1), ("start", c) when it is 0 wherever row - col > c (it may begin at
    the tile's first row - c); None when neither is proved. An attention backward's dQ has the
    first (rows are queries, the hidden dim keys), dK and dV the second (rows are keys). Loaded
    operands (the rows' log-sum-exp, rowsum(dO·O)) are taken as finite: a NaN or infinite one makes
    the row's output NaN in the tiles that are computed as well."""
    return _band(lines, row, col, accumulators, result, _Zeroed, loads_finite=True)


def _evaluate(lines, query, key, accumulators, loads_finite, each=None) -> Optional[dict]:
    """name -> abstract value of every assignment in `lines`, with `query` and `key` the indices
    and `accumulators` finite (`each(name, value)` called per line); None where a line is not a
    plain assignment of one name, or redefines an index or an accumulator."""
    env: dict = {query: _Affine(1, 0, 0), key: _Affine(0, 1, 0), **{a: _FINITE for a in accumulators}}
    ev = _Eval(env, loads_finite)
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return None
        if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assign) or len(tree.body[0].targets) != 1 \
                or not isinstance(tree.body[0].targets[0], ast.Name):
            return None
        name = tree.body[0].targets[0].id
        if name in (query, key) + tuple(accumulators):
            return None  # the indices or an accumulator redefined: not what the domain assumes
        env[name] = ev.expr(tree.body[0].value)
        if each is not None:
            each(name, env[name])
    return env


def _band(lines, query, key, accumulators, result, kind, loads_finite):
    env = _evaluate(lines, query, key, accumulators, loads_finite)
    if env is None:
        return None
    out = env.get(result)
    if not isinstance(out, kind):
        return None
    p = out.pred  # a*i + b*j + c <= 0 holds where the value may be nonzero (finite)
    if p.a != -p.b or p.b == 0:
        return None  # not a band along the diagonal
    if p.b > 0:  # b*(j - i) + c <= 0  <=>  j - i <= floor(-c / b)
        return "stop", (-p.c) // p.b
    # a*(i - j) + c <= 0 with a > 0  <=>  i - j <= floor(-c / a)
    return "start", (-p.c) // p.a


__all__ = ["band_predicates", "causal_offset", "zero_band"]
