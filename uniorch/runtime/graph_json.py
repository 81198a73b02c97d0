"""FX graphs as JSON: how an ahead-of-time bundle stores its program graph and eager segments.

JSON rather than pickled GraphModules: loading a bundle then executes no code from it (tensors
come through `torch.load(weights_only=True)`, graphs through `json`), and the files stay readable.
The graphs hold only what capture and region partitioning produce: placeholders, ATen
OpOverloads, `operator.getitem`, calls of compiled regions (`call_module`), and one output; a
capture with symbolic sizes adds size arithmetic (`aten.sym_size.int` reads, then Python's
integer operators and `torch.sym_*` on them), from a fixed table, so loading still runs no code
the bundle names.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Optional

import torch
import torch.fx as fx

from uniorch.errors import UniorchError


class GraphFormatError(UniorchError):
    """A graph holds something the bundle format cannot store, or a stored graph is malformed."""


_SIMPLE = (bool, int, str, type(None))
_ENUMS = {"dtype": torch.dtype, "layout": torch.layout, "memory_format": torch.memory_format}


def _encode(a: Any, where: str) -> Any:
    if isinstance(a, fx.Node):
        return {"node": a.name}
    if isinstance(a, _SIMPLE):
        return a
    if isinstance(a, float):  # JSON has no inf/nan; strings round-trip them exactly
        return a if math.isfinite(a) else {"float": repr(a)}
    if isinstance(a, (list, tuple)):
        items = [_encode(x, where) for x in a]
        return items if isinstance(a, list) else {"tuple": items}
    if isinstance(a, torch.device):
        return {"device": str(a)}
    for key, cls in _ENUMS.items():
        if isinstance(a, cls):
            return {key: str(a).removeprefix("torch.")}
    raise GraphFormatError(f"{where}: cannot store argument {a!r} ({type(a).__name__}) in a bundle graph")


def _decode(a: Any, env: dict, device: Optional[torch.device]) -> Any:
    if isinstance(a, list):
        return [_decode(x, env, device) for x in a]
    if not isinstance(a, dict):
        return a
    (key, value), = a.items()
    if key == "node":
        return env[value]
    if key == "tuple":
        return tuple(_decode(x, env, device) for x in value)
    if key == "float":
        return float(value)
    if key == "device":
        # capture ran on the compiling machine; ops that create tensors (full, arange, ...) name its
        # device, and on the target they must create them where the kernels run instead
        return device if device is not None else torch.device(value)
    value = getattr(torch, value, None)
    if not isinstance(value, _ENUMS.get(key, ())):
        raise GraphFormatError(f"unknown {key} {a[key]!r} in a bundle graph")
    return value


# size arithmetic a symbolic capture leaves between sym_size reads and the ops taking sizes
_SIZE_OPS = {f"operator.{f}": getattr(operator, f) for f in
             ("getitem", "add", "sub", "mul", "floordiv", "mod", "truediv", "neg", "pow", "eq", "ne", "lt", "le",
              "gt", "ge", "and_", "or_", "not_")}
_SIZE_OPS.update({f"torch.{f}": getattr(torch, f) for f in
                  ("sym_max", "sym_min", "sym_float", "sym_int", "sym_not", "sym_ite", "sym_sum") if hasattr(torch, f)})
_SIZE_OPS.update({"math.ceil": math.ceil, "math.floor": math.floor, "math.sqrt": math.sqrt})
_SIZE_NAMES = {fn: name for name, fn in _SIZE_OPS.items()}


def _op_of(target):
    """The ATen op a program calls through a function of the partitioner's (`eager_op`: oneDNN's
    LSTM layer under grad mode, for its workspace), else the target itself."""
    return getattr(target, "eager_op", target)


def _target_name(node: fx.Node) -> str:
    t = _op_of(node.target)
    if node.op in ("placeholder", "output", "call_module"):
        return str(t)
    if t in _SIZE_NAMES:
        return _SIZE_NAMES[t]
    if isinstance(t, torch._ops.OpOverload):
        return str(t)  # "aten.sort.default": namespace, op, overload
    raise GraphFormatError(f"node {node.name}: cannot store call target {t!r} in a bundle graph")


def _resolve(name: str):
    if name in _SIZE_OPS:
        return _SIZE_OPS[name]
    parts = name.split(".")
    if len(parts) != 3:
        raise GraphFormatError(f"unknown call target {name!r} in a bundle graph")
    try:
        return getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])
    except (AttributeError, RuntimeError) as err:
        raise GraphFormatError(f"this torch ({torch.__version__}) has no operator {name}: {err}") from None


def dump_graph(graph: fx.Graph) -> dict:
    nodes = []
    for n in graph.nodes:
        if n.op not in ("placeholder", "call_function", "call_module", "output"):
            raise GraphFormatError(f"node {n.name}: cannot store a '{n.op}' node in a bundle graph")
        rec = {"name": n.name, "op": n.op, "target": _target_name(n),
               "args": _encode(list(n.args), n.name),
               "kwargs": {k: _encode(v, n.name) for k, v in n.kwargs.items()}}
        if isinstance(_op_of(n.target), torch._ops.OpOverload):
            # the operator's full signature: another torch may load the graph when it agrees on it
            rec["schema"] = str(_op_of(n.target)._schema)
        nodes.append(rec)
    return {"nodes": nodes}


def has_schemas(data: dict) -> bool:
    """Whether every operator call of a stored graph records its schema (graphs saved since then)."""
    return all("schema" in rec for rec in data.get("nodes", []) if rec.get("op") == "call_function"
               and rec.get("target") not in _SIZE_OPS)


def load_graph(data: dict, device: Optional[torch.device] = None, check_schemas: bool = True) -> fx.Graph:
    """The graph `dump_graph` stored; every device argument becomes `device` when given. An operator
    whose schema in this torch differs from the recorded one is an error naming both."""
    g = fx.Graph()
    env: dict[str, fx.Node] = {}
    try:
        for rec in data["nodes"]:
            op, name = rec["op"], rec["name"]
            args = tuple(_decode(rec["args"], env, device))
            kwargs = {k: _decode(v, env, device) for k, v in rec["kwargs"].items()}
            if op == "placeholder":
                env[name] = g.placeholder(name)
            elif op == "output":
                g.output(args[0])
            else:
                target = rec["target"] if op == "call_module" else _resolve(rec["target"])
                saved = rec.get("schema")
                if check_schemas and saved is not None and str(target._schema) != saved:
                    raise GraphFormatError(f"operator {rec['target']} differs in this torch ({torch.__version__}): "
                                           f"the bundle was saved with `{saved}`, this torch has `{target._schema}`")
                env[name] = g.create_node(op, target, args, kwargs, name=name)
    except (KeyError, TypeError, ValueError) as err:
        raise GraphFormatError(f"malformed bundle graph: {type(err).__name__}: {err}") from None
    return g


__all__ = ["GraphFormatError", "dump_graph", "has_schemas", "load_graph"]
