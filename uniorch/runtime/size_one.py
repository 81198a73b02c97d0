"""Whether a symbolic compile also serves size 1 of one of its symbols.

A symbolic capture is traced for sizes ≥ 2, as torch.compile traces them: at size 1 the program may
branch another way (`if x.size(0) == 1`), a squeeze may drop the dim, a broadcast may apply. So a
model called with batch 1, then batch 2, then batch 1 at another length compiles three times in
torch.compile. Here the symbolic capture is checked against a second trace of the same call with
that symbol's dims cut to 1 (the other symbols kept symbolic): when both graphs have the same ops
with the same arguments and every value has the same shape with the symbol set to 1, the symbolic
compile computes at size 1 exactly what a compile for size 1 would, and its guard admits 1. Any
difference (a branch, a dropped dim, another decomposition) keeps 1 special, as before.

The second trace is a capture only (export and decompositions, no MLIR or kernels).
"""
from __future__ import annotations

from typing import Any, Optional

import sympy
import torch
import torch.utils._pytree as pytree


def dims_of(guard, symbol: str) -> list[tuple[int, int]]:
    """(flat argument, dim) whose size is exactly `symbol` in the guard."""
    return [(i, d) for i, leaf in enumerate(guard.leaves) if leaf[0] == "T"
            for d, e in enumerate(leaf[1]) if not isinstance(e, int) and e.is_Symbol and str(e) == symbol]


def serves_size_one(model: Any, args: tuple, kwargs: dict, dynamic: dict, guard, symbol: str) -> Optional[str]:
    """None when the symbolic capture of `model` (its `dynamic` dims symbolic) computes at
    `symbol` = 1 what a capture at that size computes; else why not."""
    from ..capture import capture

    where = dims_of(guard, symbol)
    if not where:
        return f"{symbol} is not the size of an input dim"
    flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs)))
    big, one = list(flat), list(flat)
    for i, d in where:
        t = flat[i]
        # the symbolic trace needs sizes of 2 or more: a call that brings the 1 is doubled there
        big[i] = t if t.shape[d] >= 2 else torch.cat([t, t], dim=d)
        one[i] = t.narrow(d, 0, 1).clone()
    a2, k2 = pytree.tree_unflatten(big, spec)
    a1, k1 = pytree.tree_unflatten(one, spec)
    try:
        # both traced afresh: compiling rewrites the symbolic capture's graph in place
        sym_capture = capture(model, a2, k2, dynamic=dynamic)
        one_graph = capture(model, a1, k1, dynamic=dynamic).graph_module
    except Exception as err:  # noqa: BLE001 - the model itself may refuse size 1
        return f"tracing at {symbol} = 1 failed: {type(err).__name__}: {str(err).splitlines()[0][:120]}"
    fresh = _symbol_at(sym_capture, *where[0])
    if fresh is None:
        return f"{symbol} did not stay symbolic when traced again"
    return _same_program(sym_capture.graph_module, one_graph, fresh)


def _symbol_at(captured, i: int, d: int):
    """The size symbol of flat argument i's dim d in a capture, if that size is a bare symbol."""
    name = next((inp.name for inp in captured.inputs if inp.kind == "user" and inp.target == i), None)
    node = next((n for n in captured.graph_module.graph.nodes if n.op == "placeholder" and n.name == name), None)
    val = node.meta.get("val") if node is not None else None
    if not isinstance(val, torch.Tensor) or d >= val.dim() or not isinstance(val.shape[d], torch.SymInt):
        return None
    expr = val.shape[d].node.expr
    return expr if isinstance(expr, sympy.Symbol) else None


_SYM = (torch.SymInt, torch.SymFloat, torch.SymBool)
_ASSERTS = {torch.ops.aten._assert_scalar.default, torch.ops.aten.sym_constrain_range_for_size.default,
            torch.ops.aten.sym_constrain_range.default}


def _reshapes() -> set:
    """Ops whose result is their input's elements in order, in another shape: which one a trace
    picks depends on the sizes (prims.collapse for symbolic dims, aten.view for static ones), and
    the result is fixed by the input and the output shape, so they are compared by those."""
    aten, prims = torch.ops.aten, torch.ops.prims
    out = {aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.unsqueeze.default,
           aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.flatten.using_ints,
           aten.alias.default, aten.clone.default}
    for name in ("collapse", "collapse_view", "split_dim", "view_of", "squeeze", "reshape"):
        packet = getattr(prims, name, None)
        if packet is not None:
            out.add(packet.default)
    return out


_RESHAPES = _reshapes()


class _Reshaped:
    """A chain of reshapes seen from its consumer: the value it starts from, in the final shape."""

    def __init__(self, root: torch.fx.Node, val):
        self.root, self.val = root, val


_MAYBE_IDENTITY = {torch.ops.aten.expand.default, torch.ops.aten.slice.Tensor}


def _shape_at(val, symbol) -> Optional[tuple]:
    """A tensor value's shape with `symbol` (if given) set to 1."""
    if not isinstance(val, torch.Tensor):
        return None
    out = []
    for size in val.shape:
        e = size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(size)
        if symbol is not None:
            e = e.xreplace({s: sympy.Integer(1) for s in e.free_symbols if s.name == symbol.name})
        out.append(sympy.simplify(e))
    return tuple(out)


def _identity_at_one(n: torch.fx.Node, symbol) -> bool:
    """An expand or a step-1 slice that returns its input unchanged once `symbol` is 1 (a trace at 1
    leaves such ops out)."""
    if n.target not in _MAYBE_IDENTITY or not isinstance(n.args[0], torch.fx.Node):
        return False
    if n.target is torch.ops.aten.slice.Tensor and (n.args[4] if len(n.args) > 4 else 1) != 1:
        return False
    before, after = _shape_at(n.args[0].meta.get("val"), symbol), _shape_at(n.meta.get("val"), symbol)
    return before is not None and before == after


def _program(gm: torch.fx.GraphModule, symbol=None):
    """The graph's nodes without its size arithmetic (sym_size, products of sizes: a trace at size
    1 has constants there) and its reshapes (a symbolic trace copies and collapses where one at 1
    takes a view) and the ops that do nothing at size 1, all compared by value where they are used;
    and its run-time asserts."""
    nodes, values, asserts = [], {}, []
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if n.op == "call_function" and n.target in _ASSERTS:
            asserts.append(n)
        elif n.op == "call_function" and isinstance(v, _SYM):
            values[n] = v
        elif n.op == "call_function" and (n.target in _RESHAPES and isinstance(n.args[0], torch.fx.Node)
                                          or _identity_at_one(n, symbol)):
            src = values.get(n.args[0])
            values[n] = _Reshaped(src.root if isinstance(src, _Reshaped) else n.args[0], v)
        else:
            nodes.append(n)
    return nodes, values, asserts


def _same_program(sym_gm: torch.fx.GraphModule, one_gm: torch.fx.GraphModule, symbol) -> Optional[str]:
    """None when the two graphs match node for node (see the module docstring); else the first
    difference."""
    a_nodes, a_values, a_asserts = _program(sym_gm, symbol)
    b_nodes, b_values, _ = _program(one_gm)
    if any(s.name == symbol.name for n in a_asserts for v in pytree.tree_leaves(n.args) if isinstance(v, torch.fx.Node)
           and isinstance(a_values.get(v), _SYM) for s in a_values[v].node.expr.free_symbols):
        return f"the symbolic graph asserts on {symbol} at run time"
    if len(a_nodes) != len(b_nodes):
        return f"the graphs differ in length ({len(a_nodes)} vs {len(b_nodes)} ops at size 1)"
    cmp = _Compare(symbol, {n: k for k, n in enumerate(a_nodes)}, {n: k for k, n in enumerate(b_nodes)},
                   a_values, b_values)
    for a, b in zip(a_nodes, b_nodes):  # placeholders first: they bind the other symbols' names
        if a.op != b.op or a.target != b.target:
            return f"{a.name} is {a.target} but {b.target} at size 1"
        if a.op != "placeholder" and not cmp.same((a.args, a.kwargs), (b.args, b.kwargs)):
            return f"{a.name} ({a.target}) has other arguments at size 1"
        if not cmp.same(a.meta.get("val"), b.meta.get("val")):
            return f"{a.name} ({a.target}) has another shape at size 1"
    return None


class _Compare:
    def __init__(self, symbol, index_a: dict, index_b: dict, values_a: dict, values_b: dict):
        self.symbol = symbol
        self.index_a, self.index_b, self.values_a, self.values_b = index_a, index_b, values_a, values_b
        self.rename: dict = {}  # the size-1 trace's symbols -> the symbolic trace's

    def _a(self, v):
        e = v.node.expr if isinstance(v, _SYM) else v
        if isinstance(e, sympy.Basic):
            return e.xreplace({s: sympy.Integer(1) for s in e.free_symbols if s.name == self.symbol.name})
        return e

    def _b(self, v):
        return v.node.expr if isinstance(v, _SYM) else v

    def same_size(self, x, y) -> bool:
        ex, ey = self._a(x), self._b(y)
        if isinstance(ey, sympy.Symbol) and ey not in self.rename and isinstance(ex, sympy.Symbol) \
                and ex not in self.rename.values():
            self.rename[ey] = ex  # first sight of another symbol (placeholders come first): bind it
            return True
        if isinstance(ey, sympy.Basic):
            ey = ey.xreplace(self.rename)
        if isinstance(ex, sympy.Basic) or isinstance(ey, sympy.Basic):
            try:
                return sympy.simplify(sympy.sympify(ex) - sympy.sympify(ey)) == 0
            except (TypeError, sympy.SympifyError):
                return False
        return ex == ey

    def same(self, x, y) -> bool:
        if isinstance(x, torch.fx.Node) and x in self.values_a:
            x = self.values_a[x]
        if isinstance(y, torch.fx.Node) and y in self.values_b:
            y = self.values_b[y]
        if isinstance(x, _Reshaped) or isinstance(y, _Reshaped):
            # a value or the same value reshaped (a copy at one size, none at the other): the same
            # elements in the same order, so the start and the final shape decide
            x, y = (v if isinstance(v, _Reshaped) else _Reshaped(v, v.meta.get("val")) if isinstance(v, torch.fx.Node)
                    else v for v in (x, y))
            return (isinstance(x, _Reshaped) and isinstance(y, _Reshaped) and self.same(x.root, y.root)
                    and self.same(x.val, y.val))
        if isinstance(x, torch.fx.Node) or isinstance(y, torch.fx.Node):
            return (isinstance(x, torch.fx.Node) and isinstance(y, torch.fx.Node)
                    and self.index_a.get(x, -1) == self.index_b.get(y, -2))
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)) or x.dtype != y.dtype or x.dim() != y.dim():
                return False
            return all(self.same_size(p, q) for p, q in zip(x.shape, y.shape))
        if isinstance(x, (list, tuple)) or isinstance(y, (list, tuple)):
            return (isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)) and len(x) == len(y)
                    and all(self.same(p, q) for p, q in zip(x, y)))
        if isinstance(x, dict) or isinstance(y, dict):
            return (isinstance(x, dict) and isinstance(y, dict) and x.keys() == y.keys()
                    and all(self.same(x[k], y[k]) for k in x))
        num = (*_SYM, int, float, bool)
        if isinstance(x, num) and isinstance(y, num) and not isinstance(x, bool) and not isinstance(y, bool):
            return self.same_size(x, y)
        return type(x) is type(y) and x == y
