"""The least bytes a call could move: each tensor the graph reads, read once, and each output
written once (`Report.bytes_minimum`, what `explain`'s bytes moved are measured against).

An input read only by gathers (an embedding table, a rotary cache indexed by positions) counts
the rows those gathers can return, at most the whole tensor, as the kernels' bytes count them
(uniorch/runtime/kernel_bytes.py): GPT-2's position table is read 10 rows at a time at 10 tokens.
"""
from __future__ import annotations

import math

import torch

# ops whose first operand is indexed by the others: each output element loads one of its elements
_GATHERS = ("aten.embedding.default", "aten.index.Tensor", "aten.index_select.default", "aten.gather.default")


def _numel(node) -> int | None:
    val = node.meta.get("val") if hasattr(node, "meta") else None
    n = val.numel() if isinstance(val, torch.Tensor) else None
    return n if isinstance(n, int) else None


def _read(node, full: int, itemsize: int) -> int:
    """Bytes of placeholder `node` (`full` in all) that its users read."""
    loads = 0
    for user in node.users:
        n = _numel(user) if str(user.target) in _GATHERS and user.args and user.args[0] is node else None
        if n is None or node in user.args[1:] or node in user.kwargs.values():
            return full
        loads += n
    return min(full, loads * itemsize)


def input_bytes(cg, values) -> int:
    """Bytes the graph of `cg` reads of its inputs `values` (cg.flat_inputs' order, tensors and
    not), each input it uses read once."""
    total = 0
    for t, node in zip(values, (n for n in cg.graph_module.graph.nodes if n.op == "placeholder")):
        if node.users and isinstance(t, torch.Tensor):
            total += _read(node, t.numel() * t.element_size(), t.element_size())
    return total


def spec_input_bytes(cg, spec) -> int:
    """`input_bytes` from a call's guard key: the placeholders' sizes where static, the key's for
    the user's tensors (symbolic in a dynamic compile)."""
    leaves = spec[1]
    total = 0
    for inp, node in zip(cg.inputs, (n for n in cg.graph_module.graph.nodes if n.op == "placeholder")):
        if not node.users:
            continue
        if inp.kind == "user" and leaves[inp.target][0] == "T":
            _, shape, dtype = leaves[inp.target][:3]
            total += _read(node, math.prod(shape) * dtype.itemsize, dtype.itemsize)
        elif inp.kind != "user" and isinstance(node.meta.get("val"), torch.Tensor):
            val = node.meta["val"]
            total += _read(node, val.numel() * val.element_size(), val.element_size())
    return total
