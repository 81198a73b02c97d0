"""The user's own code a model runs: its modules' forward functions and its forward hooks, with
the globals and closure cells they name.

Two things read it: the attribute guard (`attribute_guard.py`), which recompiles when such a
global changes (`SCALE = 5.0`, `CFG["scale"] = 2.0`), as Dynamo's guards do; and the side-effect
watch (`side_effects.py`), which finds the writes a traced forward made outside its graph. PyTorch's
and transformers' own code is left out: its module-level names are constants, loggers and
functions, and comparing them at every call would cost more than the guard saves.
"""
from __future__ import annotations

import types
from typing import Any, Iterator

from torch import nn

LIBRARY_ROOTS = {"builtins", "torch", "transformers", "typing", "collections", "functools", "logging", "threading",
                 "numpy", "enum", "diffusers", "peft", "accelerate", "uniorch"}
MODULE_OWN = frozenset(nn.Module().__dict__) | {"training"}  # nn.Module's own bookkeeping attributes
MISSING = object()


def is_library(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").partition(".")[0] in LIBRARY_ROOTS


def _function(obj):
    """The Python function behind a forward or a hook (a bound method's, a callable object's
    `__call__`), or None."""
    fn = getattr(obj, "__func__", obj)
    if isinstance(fn, types.FunctionType):
        return fn
    call = getattr(type(obj), "__call__", None)
    return call if isinstance(call, types.FunctionType) else None


def hooks(model: nn.Module) -> list:
    """The model's forward hooks and pre-hooks, and the global ones."""
    from torch.nn.modules import module as nn_module

    out = [*nn_module._global_forward_hooks.values(), *nn_module._global_forward_pre_hooks.values()]
    for m in model.modules():
        out += [*m._forward_hooks.values(), *m._forward_pre_hooks.values()]
    return out


def functions(model: Any) -> list[types.FunctionType]:
    """The user's functions a call of `model` runs first-hand: the forwards of its modules' classes
    (and a forward set on an instance) and its hooks, each once; for a plain function, itself."""
    if not isinstance(model, nn.Module):
        fn = _function(model)
        return [fn] if fn is not None and not is_library(fn) else []
    found: dict[int, types.FunctionType] = {}
    for m in model.modules():
        for f in (m.__dict__.get("forward"), getattr(type(m), "forward", None)):
            fn = _function(f) if f is not None else None
            if fn is not None and not is_library(fn):
                found.setdefault(id(fn), fn)
    for h in hooks(model):
        fn = _function(h)
        if fn is not None and not is_library(fn):
            found.setdefault(id(fn), fn)
    return list(found.values())


def hook_owners(model: nn.Module) -> list:
    """The objects the user's hooks are methods of (a feature extractor's `self.features`)."""
    out = {}
    for h in hooks(model) if isinstance(model, nn.Module) else []:
        owner = getattr(h, "__self__", None) if isinstance(h, types.MethodType) else (
            h if not isinstance(h, types.FunctionType) else None)
        if owner is not None and not is_library(type(owner)) and hasattr(owner, "__dict__"):
            out[id(owner)] = owner
    return list(out.values())


def code_names(code: types.CodeType) -> Iterator[str]:
    """The global and attribute names a function's code uses, its nested code's included."""
    yield from code.co_names
    for const in code.co_consts:  # comprehensions and nested functions read globals too
        if isinstance(const, types.CodeType):
            yield from code_names(const)


def named_slots(fn: types.FunctionType) -> Iterator[tuple[Any, str, Any]]:
    """(namespace dict or cell, name, value) for each global `fn`'s code names that is bound, and
    each bound closure cell."""
    g = fn.__globals__
    for name in dict.fromkeys(code_names(fn.__code__)):
        if name in g:
            yield g, name, g[name]
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            yield cell, name, cell.cell_contents
        except ValueError:  # not yet bound
            continue


def current(where, name: str):
    """The value a `named_slots` entry holds now (MISSING where unbound)."""
    return where.get(name, MISSING) if isinstance(where, dict) else getattr(where, "cell_contents", MISSING)


__all__ = ["LIBRARY_ROOTS", "MISSING", "MODULE_OWN", "code_names", "current", "functions", "hook_owners", "hooks", "is_library",
           "named_slots"]
