"""Outputs that eager returns as views of the model's inputs, returned as those views.

`x.t()`, `self.buf.t()`, `x.diagonal()`, `x.unsqueeze(0).expand(...)`: eager returns a view of
the caller's tensor (or of the model's buffer), so a write through the output reaches it, and
its strides are the view's. The compiled graph is functional: its kernels compute a copy, laid out
with eager's strides (runtime/boundary.py `laid_out`), which a write does not reach past.

Here the program export traced (before decomposition: ATen's view ops and in-place ops as the
model called them) is walked back from each output through view ops and in-place ops (which
return their own first argument) to a graph input. Where one is reached, the view ops are kept
as a small FX graph that the boundary replays on the caller's tensor after the call: after the
graph's writes into that input are copied back, so the view sees them. A replay is eager's own
view ops, so the view is eager's at any size and for any layout of the input, symbolic sizes
included (its size arguments are read off the inputs' sizes as the trace computed them).
"""
from __future__ import annotations

import operator
from typing import Optional

import torch

INPUT_VIEW = "uniorch_input_view"  # node.meta: (placeholder names, replay GraphModule) or None

_SIZE_OPS = {torch.ops.aten.sym_size.int, torch.ops.aten.sym_stride.int, torch.ops.aten.sym_numel.default,
             torch.ops.aten.sym_storage_offset.default}


def _returns_self(target) -> bool:
    """An in-place op: it writes its first argument and returns that same tensor."""
    schema = getattr(target, "_schema", None)
    if schema is None or len(schema.returns) != 1 or not schema.arguments:
        return False
    ret, first = schema.returns[0].alias_info, schema.arguments[0].alias_info
    return ret is not None and first is not None and ret.is_write and first.is_write \
        and set(ret.before_set) == set(first.before_set)


def _is_view(node: torch.fx.Node) -> bool:
    return isinstance(node.target, torch._ops.OpOverload) and node.target.is_view


def _chain(node) -> Optional[tuple[torch.fx.Node, list[torch.fx.Node], list[torch.fx.Node]]]:
    """(the input placeholder, the view nodes from it to `node` in order, the in-place ops passed
    through), or None where the output is computed (or reached through anything but views and
    in-place ops)."""
    views, writes = [], []
    while isinstance(node, torch.fx.Node) and node.op != "placeholder":
        if node.op != "call_function":
            return None
        if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node) and _is_view(node.args[0]):
            views.append(node)  # one piece of split/unbind/chunk
            node = node.args[0]
        elif _is_view(node):
            views.append(node)
            node = node.args[0]
        elif isinstance(node.target, torch._ops.OpOverload) and _returns_self(node.target):
            writes.append(node)  # done by the compiled call: at replay it is its own input
            node = node.args[0]
        else:
            return None
    if not isinstance(node, torch.fx.Node):
        return None
    return node, views[::-1], writes


def _size_deps(views: list, skip: set) -> Optional[list[torch.fx.Node]]:
    """The nodes computing the views' size arguments (symbolic sizes read off inputs), in graph
    order; None where one is computed from values."""
    seen: dict = {}

    def visit(n: torch.fx.Node) -> bool:
        if n in seen or n.op == "placeholder":
            return True
        val = n.meta.get("val")
        if n.op != "call_function" or not isinstance(val, (int, torch.SymInt, float, torch.SymFloat, bool)):
            return False
        if n.target in _SIZE_OPS:
            ok = isinstance(n.args[0], torch.fx.Node) and n.args[0].op == "placeholder"
        elif isinstance(n.target, torch._ops.OpOverload):
            return False
        else:  # operator.mul, floordiv, torch.sym_max, ...: arithmetic on sizes
            ok = all(visit(a) for a in n.all_input_nodes)
        seen[n] = ok
        return ok

    for v in views:
        for a in v.all_input_nodes:
            if a not in skip and not visit(a):
                return None
    return list(seen)


def replay_graph(gm: torch.fx.GraphModule, out: torch.fx.Node):
    """(names of the placeholders it reads, a GraphModule taking them and returning eager's view),
    or None where `out` is not a view of an input."""
    val = out.meta.get("val") if isinstance(out, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or val.is_complex():
        return None
    found = _chain(out)
    if found is None:
        return None
    base, views, writes = found
    deps = _size_deps(views, {base, *views, *writes})
    if deps is None:
        return None
    keep = set(views) | set(deps)
    used = [n for n in gm.graph.nodes if n.op == "placeholder"
            and (n is base or any(n in k.all_input_nodes for k in keep))]
    graph = torch.fx.Graph()
    env = {n: graph.placeholder(n.name) for n in used}
    env.update({w: env[base] for w in writes})
    for n in gm.graph.nodes:
        if n in keep:
            env[n] = graph.node_copy(n, lambda a: env[a])
    graph.output(env[views[-1]] if views else env[base])
    return tuple(n.name for n in used), torch.fx.GraphModule(torch.nn.Module(), graph)


def input_views(gm: torch.fx.GraphModule) -> list:
    """Per output of `gm` (the exported program before decomposition), `replay_graph`'s answer."""
    return [replay_graph(gm, a) if isinstance(a, torch.fx.Node) else None for a in gm.graph.output_node().args[0]]


def mark(gm: torch.fx.GraphModule, views: list) -> None:
    """Records `views` on the output nodes of `gm` (the decomposed program, its outputs in the
    same order)."""
    outs = gm.graph.output_node().args[0]
    if len(outs) != len(views):
        return
    for node, view in zip(outs, views):
        if view is not None and isinstance(node, torch.fx.Node):
            node.meta[INPUT_VIEW] = view


__all__ = ["INPUT_VIEW", "input_views", "mark", "replay_graph"]
