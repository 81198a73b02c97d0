"""Python int arguments traced as symbolic sizes: a position in a cache (Meta's Llama
`start_pos`), a step count, a length passed beside the tensors.

export specializes an int argument to its value, so a decode loop compiled once per position.
torch.compile makes such an int symbolic once it has seen two values (or at once with
`dynamic=True`); here it is traced as the rows of an `(n, 0)` tensor whose dim 0 is symbolic, and
the model is handed `t.shape[0]`, a SymInt. Everything that binds a size symbol from an input's
shape (the launch plan, guards, bundles) then serves the int as well; the caller's int becomes such
a tensor at every call (`boundary.int_rows`), which has no elements to move.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..runtime.boundary import int_rows


def as_rows(flat: list, dynamic: Optional[dict]) -> tuple[list, frozenset]:
    """`flat` with the int arguments (not bools) `dynamic` asks to trace symbolic as (n, 0) tensors
    (negative ints stay ints), and their positions."""
    # `dynamic` may name positions of other specs (automatic dynamic's record of what varied)
    rows = frozenset(i for i in (dynamic or {}) if i < len(flat) and type(flat[i]) is int and dynamic[i]
                     and flat[i] >= 0)
    return [int_rows(v) if i in rows else v for i, v in enumerate(flat)], rows


def value(t) -> int:
    """The int a carried argument stands for, as the model reads it (a SymInt while tracing)."""
    return t.shape[0] if isinstance(t, torch.Tensor) else t
