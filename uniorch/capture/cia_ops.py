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
are added per capture (`own_decompositions`).

Of that list, `run_decompositions` gets only the ops whose entry in capture's table is not their
own kernel (`memoized(table)`, `_own_kernel`): each listed op costs a round of dispatcher
overrides per capture, and one decomposing to its own kernel needs none."""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Optional

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
def memoized(table: Optional[dict] = None):
    """PyTorch's list, memoized, while the block runs (capture holds its one-trace-at-a-time lock,
    so no other capture swaps the function meanwhile). Where this PyTorch has no such function,
    nothing changes. Given the decomposition `table`, yields the table to pass
    `run_decompositions`: without the ATen ops it maps to their own kernel, which leave the list
    too (`_own_kernel`)."""
    ep_module, collect = _collector()
    if collect is None:
        yield table
        return
    ops = preservable()
    if table is not None:
        own = frozenset(op for op in ops if _own_kernel(op, table.get(op)))
        ops, table = ops - own, {op: fn for op, fn in table.items() if op not in own}
    # the caller copies it (`set(...)`) before removing what its table decomposes
    ep_module._collect_all_valid_cia_ops = lambda: ops
    try:
        yield table
    finally:
        ep_module._collect_all_valid_cia_ops = collect


def _own_kernel(op, fn) -> bool:
    """Whether `fn`, an ATen op's entry in a decomposition table, is the op's own
    CompositeImplicitAutograd kernel (`own_decompositions`, PyTorch's core-ATen table).

    `run_decompositions` overrides the dispatcher's entry of every op in the list, for the trace,
    with the op's decomposition or with a rule keeping it whole: about 11,000 registrations (22 per
    op) per capture, 0.15 s of it on the 2-core CI machine. An op whose decomposition is its own
    kernel decomposes the same without them: the trace below autograd runs that kernel, as eager
    does (the decomposed graphs of a Llama and of a convolution, LSTM, dropout, upsampling and SDPA
    model were the same code, tests/test_cia_ops.py). Other namespaces' ops keep PyTorch's path."""
    if not isinstance(fn, functools.partial) or getattr(op, "namespace", None) != "aten":
        return False
    return getattr(fn.func, "__name__", "") == "_special_op_to_decompose_cia" and fn.keywords.get("kernel") is op
