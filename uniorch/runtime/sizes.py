"""Rebuilding a model's outputs: what torch's pytree loses on the way."""
from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree


def restore_sizes(value: Any, spec) -> Any:
    """torch's pytree unflattens a torch.Size into a plain tuple (its leaves may be SymInts);
    eager returns torch.Size, and code like `out.numel()` or `isinstance(s, torch.Size)` relies on it."""
    if spec.is_leaf():
        return value
    if spec.type is torch.Size and all(isinstance(v, int) for v in value):
        return torch.Size(value)
    if spec.type in (tuple, list) or pytree.is_structseq_class(spec.type) or pytree.is_namedtuple_class(spec.type):
        items = [restore_sizes(v, c) for v, c in zip(value, spec.children())]
        if all(a is b for a, b in zip(items, value)):
            return value
        return type(value)(*items) if pytree.is_namedtuple_class(spec.type) else type(value)(items)
    if spec.type is dict:
        return {k: restore_sizes(value[k], c) for k, c in zip(spec.context, spec.children())}
    return value

