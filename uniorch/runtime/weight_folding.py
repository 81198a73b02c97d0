"""`uniorch.compile(model, freeze=True)`: what the graph computes from weights alone, computed once.

A model can compute on its parameters at every call: autocast casts each fp32 weight to bf16 before
its matmul (the kernel reads 4 bytes a weight where 2 would do), weight standardization (timm's
ScaledStdConv2d, NFNets) and weight norm (`parametrizations.weight_norm`, audio models) normalise
filters, an eval-mode BatchNorm turns its buffers into a scale and a shift. With freeze=True those
nodes leave the compiled graph, as Inductor's freezing folds them as constants: PyTorch runs them
once, on the first call, and the kernels read their results, kept while the weights they came from
are the same tensors at the same version (an optimizer step, `load_state_dict` or an in-place
update under no_grad bumps it, and the next call folds again; `.data`/numpy writes are not seen,
the contract freezing states, as in runtime/frozen_layouts.py).

What is folded: pure ATen ops whose every input is a weight (a parameter or buffer the graph does
not update, or a tensor frozen_layouts registered), a constant, or another folded node. What the
kernels get instead (the fold's outputs) must have a weight behind it and be no larger than the
weights it is computed from: a constant alone (an arange, a causal mask) is cheaper computed in
the kernel than read, an expand of a weight made real would only add bytes, and a view of a weight
is free as it is. Random ops and ops that write are never folded.

A fold's outputs take as much memory as the weights they come from at most (autocast's bf16 copies:
half the fp32 weights), kept as long as the compile.
"""
from __future__ import annotations

import contextlib
import operator
import threading
import weakref
from typing import Optional

import torch
import torch.fx as fx

from . import frozen_layouts

aten = torch.ops.aten
# views: a view of a weight is read as it is, so folding it alone would gain nothing
_VIEWS = {"view", "_unsafe_view", "reshape", "permute", "t", "transpose", "expand", "unsqueeze", "squeeze",
          "slice", "select", "alias", "detach", "as_strided", "unfold", "narrow", "view_as_real", "view_as_complex",
          "lift_fresh_copy", "_reshape_alias", "numpy_T", "split", "split_with_sizes", "chunk", "unbind"}
MARK = "uniorch_folded"  # meta of a main-graph placeholder that receives a fold's output


class WeightFold:
    """The weight-only part of a captured graph, split off: `main` reads its outputs as extra inputs
    (after the graph's own); `__call__(inputs)` returns the inputs with them appended."""

    def __init__(self, main: fx.GraphModule, fold: fx.GraphModule, reads: list[int], nodes: set[str]):
        self.main = main
        self.fold = fold
        self.reads = reads  # positions of the graph's inputs the fold reads
        self.nodes = nodes  # names of the captured graph's nodes it computes
        places = [p for p in main.graph.nodes if p.op == "placeholder"]
        # what the kernels read instead of the weights only the fold reads (explain's minimum)
        unread = [p for p in places
                  if MARK not in p.meta and not p.users and isinstance(p.meta.get("val"), torch.Tensor)]
        self.minimum_change = sum(_nbytes(p) for p in places if MARK in p.meta) - sum(_nbytes(p) for p in unread)
        self._lock = threading.Lock()
        self._kept: Optional[tuple[list, list, list[torch.Tensor]]] = None  # (refs, keys, outputs)

    def __call__(self, inputs) -> list:
        kept = self._kept
        if kept is not None and self._holds(kept, inputs):
            return [*inputs, *kept[2]]
        sources = [inputs[i] for i in self.reads]
        capturing = any(t.is_cuda for t in sources) and torch.cuda.is_current_stream_capturing()
        outs = self.run(sources)
        # kept only for weights that stay put: a tensor passed anew each call folds each call, and
        # a graph being captured records the fold itself (a kept result would not follow an update)
        if not capturing and all(frozen_layouts.frozen(t) for t in sources):
            frozen_layouts.register(outs)  # their own layout copies are then made once too
            with self._lock:
                self._kept = ([weakref.ref(t) for t in sources], [_key(t) for t in sources], outs)
        return [*inputs, *outs]

    def _holds(self, kept, inputs) -> bool:
        """The same tensors, at the same address and version, as when the kept outputs were made
        (about 0.3 us a weight on the CPU machine: this runs every call)."""
        refs, keys, _ = kept
        for i, r, k in zip(self.reads, refs, keys):
            t = inputs[i]
            if r() is not t or t._version != k[1] or t.data_ptr() != k[0]:
                return False
        first = inputs[self.reads[0]] if self.reads else None
        return not (first is not None and first.is_cuda and torch.cuda.is_current_stream_capturing())

    def run(self, sources) -> list[torch.Tensor]:
        """The fold's outputs for these weights, computed by PyTorch, outside autograd and autocast
        (the captured ops already hold autocast's casts)."""
        with torch.no_grad(), torch.autocast("cpu", enabled=False), _no_cuda_autocast():
            outs = self.fold(*sources)
        return list(outs)


def split(captured, values: list) -> Optional[WeightFold]:
    """The weight fold of `captured` (capture/graph.py's CapturedGraph) called with `values` (its
    flat inputs), or None when nothing worth folding reads only weights."""
    gm = captured.graph_module
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    updated = {i for _, i in captured.mutated_inputs()}
    weights = {p for i, p in enumerate(places)
               if i not in updated and (p.meta.get("uniorch_weight") or _frozen(values, i))}
    if not weights:
        return None
    eligible = _foldable(gm, weights)
    # where the graph reads what weights alone compute: there the fold hands over its outputs if
    # they are worth keeping; one that is not is computed in the graph as before, and then what it
    # reads is such a place in turn
    work = [n for n in gm.graph.nodes if n in eligible and any(u not in eligible for u in n.users)]
    outs: set = set()
    stays: set = set()
    while work:
        n = work.pop()
        if n in outs or n in stays:
            continue
        if _worth_keeping(n, weights):
            # cut where its chain of one-input ops is smallest: CPU autocast's weight -> bf16 ->
            # fp32 is kept in bf16, and the kernel reads 2 bytes a weight and widens them itself
            cut = _smallest_cut(n, eligible)
            cut = cut if _worth_keeping(cut, weights) else n
            if not _loads_as_much(cut, weights):
                outs.add(cut)
                continue
        stays.add(n)
        work.extend(i for i in n.all_input_nodes if i in eligible)
    if not outs:
        return None
    ordered = [n for n in gm.graph.nodes if n in outs]
    main = _main_graph(gm, ordered)
    fold, reads = _fold_graph(gm, ordered, places)
    kept = {n.name for n in main.graph.nodes}
    nodes = {n.name for n in fold.graph.nodes if n.op == "call_function"} - kept
    return WeightFold(main, fold, reads, nodes)


# one-input ops a kernel does as it loads (a cast, a view, a scale): moved out of the fold when
# what they read is smaller
_CHEAP = _VIEWS | {"convert_element_type", "_to_copy", "clone", "mul", "div", "add", "sub", "neg"}


def _smallest_cut(o: fx.Node, folded: set) -> fx.Node:
    best, x = o, o
    while x.op == "call_function" and _name(x) in _CHEAP and len(x.all_input_nodes) == 1:
        y = x.all_input_nodes[0]
        if y not in folded or not isinstance(y.meta.get("val"), torch.Tensor):
            break
        if _nbytes(y) < _nbytes(best) or (_nbytes(y) == _nbytes(best) and _name(best) in _VIEWS):
            best = y
        x = y
    return best


def _loads_as_much(n: fx.Node, weights: set) -> bool:
    """n is a chain of one-input cheap ops on one weight, as large as it (a bias times 1, a
    contiguous copy): the kernel would read as many bytes, and does the ops as it loads."""
    x = n
    while x not in weights:
        if x.op != "call_function" or _name(x) not in _CHEAP or len(x.all_input_nodes) != 1:
            return False
        x = x.all_input_nodes[0]
    return _nbytes(n) >= _nbytes(x)


def _nbytes(n: fx.Node) -> int:
    v = n.meta["val"]
    return v.numel() * v.element_size()


def _frozen(values: list, i: int) -> bool:
    return i < len(values) and isinstance(values[i], torch.Tensor) and frozen_layouts.frozen(values[i])


def _foldable(gm: fx.GraphModule, weights: set) -> set:
    folded: set = set()
    for n in gm.graph.nodes:
        if n.op == "call_function" and _pure(n) and _static(n) \
                and all(i in weights or i in folded for i in n.all_input_nodes):
            folded.add(n)
    return folded


def _pure(n: fx.Node) -> bool:
    if n.target is operator.getitem:
        return True
    op = n.target
    if not isinstance(op, torch._ops.OpOverload):
        return False
    if op._schema.is_mutable or torch.Tag.nondeterministic_seeded in op.tags or op.namespace not in ("aten", "prims"):
        return False
    return not op.__name__.startswith(("_assert", "sym_", "_local_scalar", "item"))


def _static(n: fx.Node) -> bool:
    """Outputs are tensors (or tuples of them) of static sizes, or plain numbers."""
    val = n.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    for v in vals:
        if isinstance(v, torch.Tensor):
            if not all(isinstance(d, int) for d in (*v.shape, *v.stride())):
                return False
        elif not isinstance(v, (int, float, bool)) or isinstance(v, torch.SymInt):
            return False
    return bool(vals)


def _worth_keeping(n: fx.Node, weights: set) -> bool:
    """A fold output: a tensor, not a view of weights, with a weight behind it, no larger than
    the weights it comes from."""
    val = n.meta.get("val")
    if not isinstance(val, torch.Tensor) or _view_only(n, weights):
        return False
    behind, seen, todo = 0, set(), [n]
    while todo:
        x = todo.pop()
        for i in x.all_input_nodes:
            if i in seen:
                continue
            seen.add(i)
            if i in weights:
                behind += i.meta["val"].numel() * i.meta["val"].element_size()
            else:
                todo.append(i)
    return behind > 0 and val.numel() * val.element_size() <= behind


def _view_only(n: fx.Node, weights: set) -> bool:
    if n in weights:
        return True
    if n.op != "call_function" or not (n.target is operator.getitem or _name(n) in _VIEWS):
        return False
    return all(_view_only(i, weights) for i in n.all_input_nodes)


def _name(n: fx.Node) -> str:
    return n.target.__name__.split(".")[0] if isinstance(n.target, torch._ops.OpOverload) else ""


def _main_graph(gm: fx.GraphModule, outs: list[fx.Node]) -> fx.GraphModule:
    """gm reading each fold output from a new placeholder (after the graph's own); what only the
    fold outputs read goes with them."""
    g = fx.Graph()
    env: dict = {}
    nodes = list(gm.graph.nodes)
    for n in nodes:
        if n.op == "placeholder":
            env[n] = g.node_copy(n, env.__getitem__)
    for k, o in enumerate(outs):
        p = env[o] = g.placeholder(f"folded_{k}")
        p.meta.update(val=o.meta["val"], uniorch_weight=True)
        p.meta[MARK] = o.name
    for n in nodes:
        if n.op != "placeholder" and n not in env:
            env[n] = g.node_copy(n, env.__getitem__)
    g.eliminate_dead_code()
    return fx.GraphModule(gm, g)


def _fold_graph(gm: fx.GraphModule, outs: list[fx.Node], places: list) -> tuple[fx.GraphModule, list]:
    """The nodes the fold outputs are computed from, reading the graph's inputs at `reads`."""
    need: set = set()
    todo = list(outs)
    while todo:
        n = todo.pop()
        if n not in need:
            need.add(n)
            todo.extend(n.all_input_nodes)
    g = fx.Graph()
    env: dict = {}
    reads = [i for i, p in enumerate(places) if p in need]
    for n in gm.graph.nodes:
        if n in need:
            env[n] = g.node_copy(n, env.__getitem__)
    g.output(tuple(env[o] for o in outs))
    return fx.GraphModule(gm, g), reads


def _key(t) -> tuple:
    # with the tensor's identity: `p.data = other` moves it (data_ptr), in-place writes bump _version
    return (t.data_ptr(), t._version)


def _no_cuda_autocast():
    return torch.autocast("cuda", enabled=False) if torch.cuda.is_available() else contextlib.nullcontext()


__all__ = ["WeightFold", "split", "MARK"]
