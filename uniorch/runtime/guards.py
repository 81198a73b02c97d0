"""Which input sizes a compile treats as symbolic, and the guard a symbolic compile runs under.

A call's spec (`call_spec`) is its pytree structure plus, per leaf, a tensor's shape, dtype,
device and requires_grad, or a constant's value. A static compile serves exactly one spec. A
symbolic compile serves every spec its `SymbolicGuard` accepts: the same structure, dtypes,
devices and constants, the dims export kept static equal, and the symbolic dims consistent (one
symbol, one value) and inside export's ranges. Sizes 0 and 1 are never traced symbolic, as in
torch.compile; a symbolic compile admits 1 for a symbol only where a trace at 1 gives the same
program (size_one.py), else a symbolic dim seeing 1 is a new compile.

Which dims to try symbolic (`CompiledModule`): all of them with `dynamic=True`; with the default
(`dynamic=None`) the dims that differed between two calls of otherwise equal specs, as
torch.compile's automatic dynamic shapes do; and always the dims marked with
`torch._dynamo.mark_dynamic`. An int argument counts as a tensor's dim 0 (capture/int_sizes.py);
export's guards relating symbols are checked with the ranges (size_guards.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import sympy
import torch
import torch.utils._pytree as pytree

from .size_guards import SizeGuards


# what a model at its cache_size_limit is told (the warning, explain's report of such a call)
LIMIT_HINT = ("Raise cache_size_limit, keep input shapes fixed, or pass a Python float that changes at "
              "every call (a temperature) as a 0-d tensor: each value of a float is a new spec (an int "
              "becomes a symbolic size once it has changed).")

def shallow_key(args: tuple):
    """A key equal for two calls only where `call_spec` is: per argument a tensor's metadata, or a
    list's or tuple's type and its tensors' metadata (an optimizer's arguments); None for any
    other argument."""
    key = []
    for a in args:
        if type(a) is torch.Tensor:
            key.append((a.shape, a.dtype, a.device.type, a.requires_grad))
        elif type(a) in (list, tuple) and all(isinstance(t, torch.Tensor) for t in a):
            key.append((type(a), tuple((t.shape, t.dtype, t.device.type, t.requires_grad) for t in a)))
        else:
            return None
    return tuple(key)


def call_spec(args: tuple, kwargs: dict):
    """The guard key of one call: structure, and per leaf its tensor metadata or constant value."""
    leaves, tree = pytree.tree_flatten((args, kwargs))
    key = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            key.append(("T", tuple(leaf.shape), leaf.dtype, leaf.device.type, leaf.requires_grad))
        elif isinstance(leaf, (int, float, bool, str, type(None))):
            key.append(("C", type(leaf).__name__, leaf))
        else:  # dtypes, devices, ...: equal values share a compile; other objects by identity
            try:
                key.append(("O", type(leaf).__name__, hash(leaf), leaf))
            except TypeError:
                key.append(("O", type(leaf).__name__, id(leaf)))
    return (str(tree), tuple(key))


def marked_dims(args: tuple, kwargs: dict) -> dict[int, set[int]]:
    """Dims marked by `torch._dynamo.mark_dynamic`, per flat argument index."""
    leaves = pytree.tree_leaves((args, kwargs))
    return {i: set(t._dynamo_dynamic_indices) for i, t in enumerate(leaves)
            if isinstance(t, torch.Tensor) and getattr(t, "_dynamo_dynamic_indices", None)}


def every_dim(args: tuple, kwargs: dict) -> dict[int, set[int]]:
    """`dynamic=True`: every dim of every tensor argument that is not 0 or 1, and every int
    argument above 1 (as dim 0: traced as the rows of an (n, 0) tensor, capture/int_sizes.py)."""
    leaves = pytree.tree_leaves((args, kwargs))
    dims = {i: {d for d, n in enumerate(t.shape) if n > 1} for i, t in enumerate(leaves)
            if isinstance(t, torch.Tensor) and any(n > 1 for n in t.shape)}
    dims.update({i: {0} for i, n in enumerate(leaves) if type(n) is int and n > 1})
    return dims


def varying_dims(old_key, new_key) -> Optional[dict[int, list[tuple[int, int, int]]]]:
    """Per flat argument, (dim, old size, new size) where two specs differ only in tensor sizes of
    equal rank; None when they differ in anything else (structure, dtype, constants...)."""
    (tree_a, leaves_a), (tree_b, leaves_b) = old_key, new_key
    if tree_a != tree_b or len(leaves_a) != len(leaves_b):
        return None
    out: dict[int, list[tuple[int, int, int]]] = {}
    for i, (a, b) in enumerate(zip(leaves_a, leaves_b)):
        if a[:2] == b[:2] == ("C", "int") and a[2] != b[2]:  # an int argument: its dim 0 as a size
            out[i] = [(0, a[2], b[2])]
            continue
        if a[0] != "T" or b[0] != "T":
            if a != b:
                return None
            continue
        if a[2:] != b[2:] or len(a[1]) != len(b[1]):
            return None
        diff = [(d, x, y) for d, (x, y) in enumerate(zip(a[1], b[1])) if x != y]
        if diff:
            out[i] = diff
    return out or None


def _linear(e):
    """(symbol, a, b) for an expression a * symbol + b with integers a >= 1 and b; else None."""
    if len(e.free_symbols) != 1:
        return None
    (sym,) = e.free_symbols
    a, b = e.diff(sym), e.subs(sym, 0)
    if not (a.is_Integer and b.is_Integer and a >= 1) or sympy.expand(e - (a * sym + b)) != 0:
        return None
    return sym, int(a), int(b)


def _sym_expr(size):
    """A placeholder's dim: an int, or its sympy expression."""
    if isinstance(size, torch.SymInt):
        expr = size.node.expr
        return int(expr) if expr.is_number else expr
    return int(size)


@dataclass
class SymbolicGuard:
    """Accepts the specs a symbolic capture serves (see the module docstring)."""

    tree: str
    leaves: list  # per flat argument: ("T", dims, dtype, device, requires_grad) with dims int | sympy expr; or a constant key
    ranges: dict = field(default_factory=dict)  # symbol name -> (low, high or None)
    names: dict = field(default_factory=dict)  # symbol name -> "input i dim d", where it is first read
    relations: Any = None  # size_guards.SizeGuards: export's guards relating the symbols

    @staticmethod
    def of(captured, key) -> "SymbolicGuard":
        tree, leaves = key
        vals = {n.name: n.meta.get("val") for n in captured.graph_module.graph.nodes if n.op == "placeholder"}
        by_index = {i.target: vals.get(i.name) for i in captured.inputs if i.kind == "user"}
        out, names, derived = [], {}, {}
        rows = {i.target for i in captured.inputs if i.kind == "user" and getattr(i, "int_rows", False)}
        for i, leaf in enumerate(leaves):
            val = by_index.get(i)
            if i in rows and isinstance(val, torch.Tensor) and val.dim() == 2:  # an int traced as a size
                e = _sym_expr(val.shape[0])
                if not isinstance(e, int) and e.is_Symbol:
                    names.setdefault(str(e), f"input {i} (an int)")
                out.append(("N", e) if not isinstance(e, int) else leaf)
            elif leaf[0] == "T" and isinstance(val, torch.Tensor) and val.dim() == len(leaf[1]):
                dims = tuple(_sym_expr(s) for s in val.shape)
                for d, e in enumerate(dims):
                    if not isinstance(e, int) and e.is_Symbol:
                        names.setdefault(str(e), f"input {i} dim {d}")
                    elif not isinstance(e, int) and _linear(e) is not None:  # 2*s: a batch flattened into rows
                        derived.setdefault(str(_linear(e)[0]), f"input {i} dim {d} ({e})")
                out.append(("T", dims, *leaf[2:]))
            else:
                out.append(leaf)
        for sym, where in derived.items():  # symbols no dim is by itself: read off a dim a * s + b
            names.setdefault(sym, where)
        ranges = {}
        for sym, vr in getattr(captured, "symbol_ranges", {}).items():
            if sym in names:
                ranges[sym] = vr
        kept, unread = getattr(captured, "size_guards", ((), ()))
        if unread:  # the compile's caller keeps the static compile, and says why
            raise ValueError(f"a size guard uniorch cannot check: {unread[0]}")
        return SymbolicGuard(tree, out, ranges, names, SizeGuards(kept) if kept else None)

    @property
    def symbolic(self) -> bool:
        return bool(self.names)

    def check(self, key) -> Optional[str]:
        """None when the spec `key` is served; else why not (for explain's recompile reasons)."""
        tree, leaves = key
        if tree != self.tree or len(leaves) != len(self.leaves):
            return "argument structure differs"
        bound: dict[str, int] = {}
        later = []
        for i, (want, got) in enumerate(zip(self.leaves, leaves)):
            if want[0] == "N" and got[:2] == ("C", "int"):  # an int traced as a size: (n,) to the checks below
                want, got = ("T", (want[1],)), ("T", (got[2],))
            if want[0] != "T" or got[0] != "T":
                if want != got:
                    return f"input {i} differs ({_short(want)} vs {_short(got)})"
                continue
            if want[2:] != got[2:] or len(want[1]) != len(got[1]):
                return f"input {i}: dtype, device, requires_grad or rank differs"
            for d, (e, n) in enumerate(zip(want[1], got[1])):
                if isinstance(e, int):
                    if e != n:
                        return f"input {i} dim {d} is {n}, compiled for {e} only"
                elif e.is_Symbol:
                    s = str(e)
                    if s in bound and bound[s] != n:
                        return f"input {i} dim {d} is {n}, but {s} = {bound[s]} ({self.names.get(s, '')})"
                    bound[s] = n
                else:
                    later.append((i, d, e, n))
        for i, d, e, n in later:  # a symbol only a dim a * s + b gives (a batch flattened into rows)
            linear = _linear(e)
            if linear is not None and str(linear[0]) not in bound:
                sym, a, b = linear
                if (n - b) % a:
                    return f"input {i} dim {d} is {n}, not {e}"
                bound[str(sym)] = (n - b) // a
        for s, n in bound.items():
            lo, hi = self.ranges.get(s, (2, None))
            if n < lo or (hi is not None and n > hi):
                return f"{s} = {n} is outside [{lo}, {'∞' if hi is None else hi}] ({self.names.get(s, '')})"
        for i, d, e, n in later:
            free = {str(x) for x in e.free_symbols}
            if not free <= set(bound):
                return f"input {i} dim {d}: {e} is not determined by the other inputs"
            if int(e.subs({x: bound[str(x)] for x in e.free_symbols})) != n:
                return f"input {i} dim {d} is {n}, not {e}"
        return self.relations.failed(bound, self.names) if self.relations is not None else None

    def ones_below_range(self, key) -> set[str]:
        """The symbols that would be 1 for `key` where the guard starts at 2, when `key` passes the
        guard once 1 is admitted for them (size_one.py decides whether it may be); else empty."""
        tree, leaves = key
        if tree != self.tree or len(leaves) != len(self.leaves):
            return set()
        ones = {str(e) for want, got in zip(self.leaves, leaves) if want[0] == "T" == got[0]
                and len(want[1]) == len(got[1]) for e, n in zip(want[1], got[1])
                if not isinstance(e, int) and e.is_Symbol and n == 1 and self.ranges.get(str(e), (2, None))[0] > 1}
        if not ones:
            return set()
        saved = dict(self.ranges)
        for sym in ones:
            self.ranges[sym] = (1, self.ranges.get(sym, (2, None))[1])
        try:
            return ones if self.check(key) is None else set()
        finally:
            self.ranges = saved

    def describe(self) -> list[str]:
        """One line per symbol: where it is read and its range."""
        out = []
        for s, where in self.names.items():
            lo, hi = self.ranges.get(s, (2, None))
            out.append(f"{s}: {where}, {lo}..{'∞' if hi is None else hi}")
        return out


def _short(leaf: Any) -> str:
    return repr(leaf[2] if len(leaf) > 2 else leaf)[:40]
