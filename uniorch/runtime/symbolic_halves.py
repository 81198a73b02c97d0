"""Training graphs with symbolic sizes: one compile of each half for every batch size or sequence
length, as torch.compile's automatic dynamic gives.

Dynamo (dynamic=None) traces a model again with symbolic sizes when a call's sizes differ from the
first; AOTAutograd's halves then take the sizes as SymInt arguments beside the tensors (and the
forward returns them, saved for the backward). uniorch's compile takes tensors: an argument that
is a size some tensor argument has is read from that tensor inside the graph instead
(`aten.sym_size`), and sizes returned are filled in by the caller from the same tensor. The halves
are then compiled with the dims Dynamo made symbolic symbolic (`torch._dynamo.mark_dynamic` on the
example tensors: `CompiledModule`'s symbolic compile), so later sizes are served without compiling
again. Unlike the inference path's automatic dynamic, no static compile is tried first to compare
with: Dynamo has already seen the sizes vary, and in a training loop over varying lengths an op
left to PyTorch costs microseconds a step where a compile per length costs seconds.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Optional

import sympy
import torch


@dataclass
class SizeArgs:
    """How a half's graph was changed: what its caller drops from the arguments and adds to the results."""

    dropped: list[int]  # argument positions that were sizes, or tensors of symbolic size nothing reads
    returned: list[tuple[int, Any]]  # (result position, its size expression) of the sizes returned
    sources: dict  # symbol -> (argument position after dropping, dim, a, b): that dim is a * symbol + b
    marks: dict[int, dict[int, Optional[tuple]]]  # argument (after dropping) -> its symbolic dims: (symbol name, a, b)
    carried: tuple = ()  # argument positions of integers passed as the rows of an (n, 0) tensor
    signed: tuple = ()  # those of them Dynamo's range lets be negative (no row count can be)

    def arguments(self, flat) -> list:
        drop, carried = set(self.dropped), set(self.carried)
        if carried:
            device = next((a.device for a in flat if isinstance(a, torch.Tensor)), None)
            for j in self.signed:
                if _hint_of(flat[j]) < 0:
                    raise NegativeSize(f"argument {j} is {_hint_of(flat[j])}")
        return [_rows_of(a, device) if j in carried else a for j, a in enumerate(flat) if j not in drop]

    def results(self, args: list, outs) -> list:
        outs = list(outs)

        def symbol(sym):
            i, d, a, b = self.sources[sym]
            return (args[i].shape[d] - b) // a

        for pos, expr in self.returned:  # ascending positions: each lands where the graph returned it
            outs.insert(pos, _evaluate(expr, symbol, _PYTHON))
        return outs


class NegativeSize(ValueError):
    """A carried integer is negative at this call: the graph as Dynamo gave it runs instead."""


def _rows_of(n, device) -> torch.Tensor:
    """An integer argument as a tensor of n rows and no elements, whose size the graph reads."""
    value = _hint_of(n)
    if value < 0:
        raise ValueError(f"an integer argument carried as a size is negative ({value})")
    return torch.empty((value, 0), device=device)


def _hint_of(n) -> int:
    return int(n.node.hint) if isinstance(n, torch.SymInt) else int(n)


def _scan(example_inputs: list, placeholders: list, dropped: list[int], carried) -> tuple[dict, dict]:
    """(sources, marks): per symbol the argument dim giving it, the one that is the symbol itself
    first, and per argument (numbered after dropping) its symbolic dims. A carried integer is the
    rows of its (n, 0) tensor."""
    new_index = {j: j - sum(1 for k in dropped if k < j) for j in range(len(example_inputs)) if j not in dropped}
    sources: dict = {}  # symbol -> (placeholder, argument position after dropping, dim, a, b, example size)
    marks: dict[int, dict[int, Optional[tuple]]] = {}
    for j, e in enumerate(example_inputs):
        if j not in new_index:  # dropped: a size, or a tensor nothing reads
            continue
        shape = e.shape if isinstance(e, torch.Tensor) else (e,) if j in carried else ()
        for d, size in enumerate(shape):
            if _static(size):
                continue
            marks.setdefault(new_index[j], {})[d] = _name(size.node.expr)
            linear = _linear(size.node.expr)
            if linear is not None:
                sym, a, b = linear
                old = sources.get(sym)
                if old is None or (a, abs(b)) < (old[3], abs(old[4])):
                    sources[sym] = (placeholders[j], new_index[j], d, a, b, _hint_of(size))
    return sources, marks


def _carried(example_inputs: list, dropped: list[int], sources: dict) -> tuple[list[int], list[int]]:
    """Integer arguments that are a symbol no tensor argument's size gives (Dynamo's automatic
    dynamic on an int: a position, a length the model computes): they travel as the rows of an
    (n, 0) tensor, so the graph compiles with that size symbolic, where otherwise it ran in
    PyTorch. Also (second list) those whose range admits negative values, as a plain Python int's
    does: a call where one is negative runs the graph in PyTorch (`SizeArgs.arguments`)."""
    out, signed = [], []
    for j in dropped:
        expr = example_inputs[j].node.expr
        if not expr.is_Symbol or expr in sources:
            continue
        found = example_inputs[j].node.shape_env.var_to_range.get(expr)
        if found is None or _hint_of(example_inputs[j]) < 2:
            continue
        out.append(j)
        if found.lower < 0:
            signed.append(j)
    return out, signed


def sizes_from_tensors(gm: torch.fx.GraphModule, example_inputs: list) -> Optional[SizeArgs]:
    """Rewrites `gm` to compute its size arguments from its tensor arguments' sizes; None (and `gm`
    unchanged) when nothing is symbolic, or a size's symbols are not recoverable from the tensors'
    sizes (each a * symbol + b), or its expression uses arithmetic `_evaluate` does not know
    (then the half compiles for the example's sizes, as before)."""
    symbolic = [e for e in example_inputs if isinstance(e, torch.SymInt)
                or (isinstance(e, torch.Tensor) and not all(_static(s) for s in e.shape))]
    if not symbolic:
        return None
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    output = next(n for n in gm.graph.nodes if n.op == "output")
    results = output.args[0]
    if len(placeholders) != len(example_inputs) or not isinstance(results, (tuple, list)):
        return None
    sizes = [j for j, e in enumerate(example_inputs) if isinstance(e, torch.SymInt)]
    # a tensor of symbolic size the graph never reads (checkpointing's saved RNG state: its example
    # had some length, the real call's is 0) is dropped too: compiled for the example's size, the
    # backward compiled once more at the first real call
    unread = [j for j, e in enumerate(example_inputs) if isinstance(e, torch.Tensor) and not placeholders[j].users
              and not all(_static(s) for s in e.shape)]
    dropped = sorted(sizes + unread)
    sources, marks = _scan(example_inputs, placeholders, dropped, ())
    carried, signed = _carried(example_inputs, sizes, sources)
    if carried:
        dropped = [j for j in dropped if j not in carried]
        sources, marks = _scan(example_inputs, placeholders, dropped, carried)
    taken = {placeholders[j]: example_inputs[j].node.expr for j in dropped if placeholders[j].users}
    returned = [(pos, r.meta["val"].node.expr) for pos, r in enumerate(results)
                if isinstance(r, torch.fx.Node) and isinstance(r.meta.get("val"), torch.SymInt)]

    def hint(sym):  # the symbol's value in the example call
        _, _, _, a, b, size = sources[sym]
        return (size - b) // a

    for expr in [*taken.values(), *(e for _, e in returned)]:
        if not expr.free_symbols <= sources.keys() or _evaluate(expr, hint, _PYTHON) is None:
            return None
    # the graph from here on: sizes computed from the tensors' sizes, not taken, not returned
    graph = gm.graph
    with graph.inserting_before(placeholders[-1].next):  # in order, before the first op
        nodes = _graph_ops(graph)
        symbols: dict = {}

        def symbol(sym):
            if sym not in symbols:
                p, _, d, a, b, _ = sources[sym]
                v = graph.call_function(torch.ops.aten.sym_size.int, (p, d))
                v = graph.call_function(operator.sub, (v, b)) if b else v
                symbols[sym] = graph.call_function(operator.floordiv, (v, a)) if a != 1 else v
            return symbols[sym]

        for p, expr in taken.items():
            p.replace_all_uses_with(_evaluate(expr, symbol, nodes))
        fake_mode = torch._guards.detect_fake_mode(example_inputs) if carried else None
        for j in carried:  # the integer is now its tensor's row count
            p = placeholders[j]
            v = symbol(example_inputs[j].node.expr)
            p.replace_all_uses_with(v, delete_user_cb=lambda user, v=v: user is not v)
            if fake_mode is not None:
                with fake_mode:
                    p.meta["val"] = torch.empty((example_inputs[j], 0))
    gone = {pos for pos, _ in returned}
    output.args = (type(results)(r for pos, r in enumerate(output.args[0]) if pos not in gone),)
    for node in reversed(list(graph.nodes)):  # size arithmetic nothing reads any more
        if not node.users and node.op == "call_function" and _is_size(node):
            graph.erase_node(node)
    for j in dropped:
        graph.erase_node(placeholders[j])
    graph.lint()
    gm.recompile()
    return SizeArgs(dropped, returned, {sym: src[1:5] for sym, src in sources.items()}, marks, tuple(carried),
                    tuple(signed))


def mark_symbolic(real: list, sizes: Optional[SizeArgs]) -> None:
    """The example tensors' symbolic dims, as `torch._dynamo.mark_dynamic` marks them, with the
    names of Dynamo's symbols (capture's `DIM_NAMES`): dims Dynamo knew equal stay one symbol."""
    from uniorch.capture.trace import DIM_NAMES

    for i, dims in (sizes.marks.items() if sizes is not None else ()):
        names = {}
        for d, name in dims.items():
            if real[i].shape[d] > 1:  # a size-1 example cannot stand for the others
                torch._dynamo.mark_dynamic(real[i], d)
                if name:
                    names[d] = name
        if names:
            setattr(real[i], DIM_NAMES, names)


def _name(expr) -> Optional[tuple[str, int, int]]:
    """(name, a, b) for a dim of size a * symbol + b, the name that of Dynamo's symbol (a batch
    flattened into the rows, `2*s0`, is `2 * Dim(s0)` to export); None for any other expression."""
    linear = _linear(expr)
    return None if linear is None else (f"u_{linear[0]}", linear[1], linear[2])


def _is_size(node: torch.fx.Node) -> bool:
    """A node computing a size (`sym_size`, integer arithmetic on sizes): pure, erased when unread."""
    return node.target is torch.ops.aten.sym_size.int or (
        node.target in (operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod,
                        torch.sym_max, torch.sym_min) and isinstance(node.meta.get("val", 0), (int, torch.SymInt)))


def _static(s) -> bool:
    return isinstance(s, int) or (isinstance(s, torch.SymInt) and s.node.expr.is_number)


def _linear(expr):
    """(symbol, a, b) when `expr` is a * symbol + b with integers a >= 1 and b, else None."""
    if expr.is_Symbol:
        return expr, 1, 0
    syms = expr.free_symbols
    if len(syms) != 1:
        return None
    (sym,) = syms
    poly = expr.as_poly(sym) if expr.is_polynomial(sym) else None
    if poly is None or poly.degree() != 1:
        return None
    a, b = poly.all_coeffs()
    if not (a.is_Integer and b.is_Integer and a >= 1):
        return None
    return sym, int(a), int(b)


_PYTHON = {"add": operator.add, "mul": operator.mul, "floordiv": operator.floordiv, "mod": operator.mod,
           "max": max, "min": min, "const": int}


def _graph_ops(graph: torch.fx.Graph) -> dict:
    def call(fn):
        return lambda a, b: graph.call_function(fn, (a, b))

    return {"add": call(operator.add), "mul": call(operator.mul), "floordiv": call(operator.floordiv),
            "mod": call(operator.mod), "max": call(torch.sym_max), "min": call(torch.sym_min), "const": int}


def _evaluate(expr, symbol, ops: dict):
    """`expr` (a size expression: sums, products, floor division, modulo, min, max of integers and
    symbols) computed with `ops` (Python's integers, or FX nodes); None where it holds anything else."""
    from torch.utils._sympy.functions import FloorDiv, Max, Min, Mod, PythonMod

    if expr.is_Integer:
        return ops["const"](expr)
    if expr.is_Symbol:
        return symbol(expr)
    kind = {sympy.Add: "add", sympy.Mul: "mul", FloorDiv: "floordiv", Mod: "mod", PythonMod: "mod",
            Max: "max", Min: "min"}.get(type(expr))
    if kind is None:
        return None
    parts = [_evaluate(a, symbol, ops) for a in expr.args]
    if any(p is None for p in parts):
        return None
    out = parts[0]
    for p in parts[1:]:
        out = ops[kind](out, p)
    return out
