"""The list of CompositeImplicitAutograd ops `run_decompositions` can preserve, computed once per
set of registered ops instead of once per capture.

`ExportedProgram.run_decompositions` splits its table by that list, which PyTorch rebuilds on every
call: it queries the dispatcher's CompositeImplicitAutograd registrations once per op namespace
(29 in a plain process) and walks every namespace's ops (only aten's result is cached, "because
custom op registry API in python can still add entries"). That was 0.05 s of a small model's
0.6 s compile. The list is memoized here by what can change it, the op namespaces and the number
of CompositeImplicitAutograd registrations, and only inside capture's own call (`memoized()`).

Capture's table is built once per process (`decompositions._table`), from PyTorch's core-ATen table,
which maps every CIA op registered at that moment to its own kernel; an op a library registers
later would be preserved, and run eagerly, where one registered earlier compiled. Those later ops
are added per capture (`own_decompositions`)."""
from __future__ import annotations

import contextlib
import threading

import torch

_lock = threading.Lock()
_memo: dict = {}


def _key() -> tuple:
    registered = torch._C._dispatch_get_registrations_for_dispatch_key("CompositeImplicitAutograd")
    return tuple(torch.ops._dir), len(registered)


def _collector():
    from torch.export import exported_program as ep_module

    if not hasattr(torch.ops, "_dir"):
        return None, None
    return ep_module, getattr(ep_module, "_collect_all_valid_cia_ops", None)


def preservable() -> frozenset:
    """PyTorch's list now (memoized); empty where this PyTorch has no such function."""
    _, collect = _collector()
    if collect is None:
        return frozenset()
    key = _key()
    with _lock:
        ops = _memo.get(key)
        if ops is None:
            ops = frozenset(collect())
            _memo.clear()
            _memo[key] = ops
    return ops


def own_decompositions(ops) -> dict:
    """Each op's own CompositeImplicitAutograd kernel as its decomposition, as PyTorch's
    `core_aten_decompositions()` maps the CIA ops registered when it is called."""
    try:
        from torch._export.utils import _get_decomp_for_cia
    except ImportError:
        return {}
    return {op: _get_decomp_for_cia(op) for op in ops}


@contextlib.contextmanager
def memoized():
    """PyTorch's list, memoized, while the block runs (capture holds its one-trace-at-a-time lock,
    so no other capture swaps the function meanwhile). Where this PyTorch has no such function,
    nothing changes."""
    ep_module, collect = _collector()
    if collect is None:
        yield
        return
    ops = preservable()
    # the caller copies it (`set(...)`) before removing what its table decomposes
    ep_module._collect_all_valid_cia_ops = lambda: ops
    try:
        yield
    finally:
        ep_module._collect_all_valid_cia_ops = collect
