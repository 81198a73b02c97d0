"""Writes a traced forward makes outside its graph, found after the trace.

A forward hook that keeps an activation (`feats["h"] = out`), a forward that logs into a list or
a module's dict (`self.stats["mean"] = h.mean().item()`), a counter in a global: export runs
them once, while tracing, on tracing tensors, and the compiled graph never again. The user's
dict then held a FakeTensor, and later calls left it as it was.

`Watch` notes, before the trace, the containers the user's code can reach (dicts, lists and sets
held by the model's own modules and by its hooks' objects, and named by its forwards and hooks as
globals or closure variables: `user_code.py`) and the values of those names. After the trace it
says what changed and puts it back; capture then raises `StateWriteError`, and the call runs
through Dynamo, which replays such writes with the real values at every call.
"""
from __future__ import annotations

from typing import Any

from torch import nn

from . import user_code

_CONTAINERS = (dict, list, set)


def _contents(c) -> tuple:
    if type(c) is dict:
        return tuple((k, id(v)) for k, v in c.items())
    if type(c) is set:
        return tuple(sorted(map(id, c)))
    return tuple(map(id, c))


class Watch:
    def __init__(self, model: Any):
        self.containers: dict[int, tuple[str, Any, tuple, Any]] = {}  # id -> (where, container, ids, copy)
        self.names: list[tuple[Any, str, Any]] = []  # (dict or cell, name, value)
        owners = []
        if isinstance(model, nn.Module):
            owners = [(name or type(model).__name__, m) for name, m in model.named_modules()
                      if not user_code.is_library(type(m))]
            owners += [(type(o).__name__, o) for o in user_code.hook_owners(model)]
        for where, obj in owners:
            for key, value in vars(obj).items():
                if key not in user_code.MODULE_OWN and type(value) in _CONTAINERS:
                    self._keep(f"{where}.{key}", value)
        for fn in user_code.functions(model):
            for ns, name, value in user_code.named_slots(fn):
                self.names.append((ns, name, value))
                if type(value) in _CONTAINERS:
                    self._keep(name, value)

    def _keep(self, where: str, c) -> None:
        if id(c) not in self.containers:
            self.containers[id(c)] = (where, c, _contents(c), c.copy())

    def changed(self) -> list[str]:
        out = [where for where, c, ids, _ in self.containers.values() if _contents(c) != ids]
        out += [name for ns, name, value in self.names if user_code.current(ns, name) is not value]
        return list(dict.fromkeys(out))

    def undo(self) -> None:
        """The containers' contents and the names' values as before the trace: the eager or
        Dynamo run of the call makes the writes itself."""
        for _, c, ids, copy in self.containers.values():
            if _contents(c) != ids:
                c.clear()
                c.update(copy) if type(c) is not list else c.extend(copy)
        for ns, name, value in self.names:
            if user_code.current(ns, name) is not value:
                if isinstance(ns, dict):
                    ns[name] = value
                else:
                    ns.cell_contents = value


__all__ = ["Watch"]
