"""Finds backends: every entry point in the `uniorch.backends` group names a `Backend` subclass.

The built-in backends are declared in uniorch's own pyproject.toml under that group, exactly as a
vendor's plugin package declares its own. A plugin that fails to import, that is not a `Backend`,
or that reuses a taken name is skipped with a warning naming it; the other backends keep working.
"""
from __future__ import annotations

import dataclasses
import functools
import warnings
from importlib import metadata

from .sdk import Backend

GROUP = "uniorch.backends"
# The same declarations as pyproject.toml; used only when the installed metadata predates a
# built-in (a source checkout run before re-installing), so the built-ins never go missing.
BUILTINS = {
    "interpret": "uniorch.backends.interpret:InterpretBackend",
    "cuda": "uniorch.backends.cuda:CudaBackend",
    "rocm": "uniorch.backends.rocm:RocmBackend",
    "cann": "uniorch.backends.cann:CannBackend",
    "cpu": "uniorch.backends.cpu:CpuBackend",
}


class PluginWarning(UserWarning):
    pass


def _entry_points() -> list[tuple[str, str, object]]:
    """(name, "module:attr", loader) in load order: built-ins first, then plugins by name."""
    # a list per name, not a dict: two packages declaring one name must both be seen (and the
    # second reported), never one silently dropped
    eps: dict[str, list] = {}
    for ep in metadata.entry_points(group=GROUP):
        if not any(ep.value == seen.value for seen in eps.get(ep.name, [])):  # same dist seen twice on sys.path
            eps.setdefault(ep.name, []).append(ep)
    found = []
    for name, value in BUILTINS.items():
        found.append((name, value, functools.partial(_load_value, value)))
        for ep in eps.pop(name, []):
            if ep.value != value:  # a plugin claiming a built-in's name
                found.append((name, ep.value, ep.load))
    for name in sorted(eps):
        found.extend((name, ep.value, ep.load) for ep in eps[name])
    return found


def _load_value(value: str):
    import importlib

    module, _, attr = value.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@functools.lru_cache(maxsize=None)
def backends() -> dict[str, type[Backend]]:
    """Every backend that loaded, by name."""
    table: dict[str, type[Backend]] = {}
    for name, value, load in _entry_points():
        try:
            cls = load()
        except Exception as err:  # noqa: BLE001 - a broken plugin must not break uniorch
            warnings.warn(f"uniorch: backend plugin '{name}' ({value}) failed to import and is skipped: "
                          f"{type(err).__name__}: {err}", PluginWarning, stacklevel=2)
            continue
        problem = _check(name, cls)
        if problem:
            warnings.warn(f"uniorch: backend plugin '{name}' ({value}) is skipped: {problem}", PluginWarning,
                          stacklevel=2)
            continue
        if name in table:
            warnings.warn(f"uniorch: backend plugin '{name}' ({value}) is skipped: the name '{name}' is already "
                          f"taken by {table[name].__module__}.{table[name].__qualname__}", PluginWarning, stacklevel=2)
            continue
        table[name] = cls
    return table


def _check(name: str, cls) -> str:
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        return f"it names {cls!r}, not a subclass of uniorch.backends.Backend"
    if cls.name != name:
        return f"its class declares name '{cls.name}' but its entry point is named '{name}'"
    if not cls.archs:
        return "it declares no architectures (Backend.archs is empty)"
    opts = getattr(cls, "options_class", None)
    # the driver hashes the options into its cache key and reads num_warps/num_stages from them
    if not (isinstance(opts, type) and dataclasses.is_dataclass(opts) and opts.__dataclass_params__.frozen
            and callable(getattr(opts, "hash", None))
            and {"num_warps", "num_stages"} <= {f.name for f in dataclasses.fields(opts)}):
        return (f"its options_class {getattr(opts, '__qualname__', opts)!r} is not a frozen dataclass with "
                f"num_warps, num_stages and hash(): subclass uniorch.backends.KernelOptions")
    return ""


def get(name: str) -> type[Backend]:
    from uniorch.targets import TargetError, known_targets

    table = backends()
    if name not in table:
        raise TargetError(f"unknown target '{name}'; known targets: {', '.join(known_targets())}")
    return table[name]


def reset() -> None:
    """Forget discovered backends (tests that install or break a plugin call this)."""
    backends.cache_clear()


__all__ = ["GROUP", "PluginWarning", "backends", "get", "reset"]
