"""What happens to a compiled graph's outputs at the model's boundary, after the kernels ran.

Capture leaves three kinds of work there (see uniorch/capture: checks.py, complex_pairs.py,
data_dependent.py): run-time checks, complex outputs computed as real pairs, and outputs of
data-dependent size computed padded with a count. Both `CapturedGraph.finish` and loaded bundles
use these, so this module stays light: loading a bundle must not import capture's tracing.
"""
from __future__ import annotations

import torch


class CheckFailed(RuntimeError):
    """A `require` condition was false at run time: the call is redone eagerly."""


def verify(spec: dict, value: torch.Tensor) -> None:
    """Raises eager's error for a failed linalg check, CheckFailed for a failed `require`."""
    if spec["op"] == "linalg_check_errors":
        torch._linalg_check_errors(value, spec["api"], is_matrix=spec["is_matrix"])
    elif not bool(value.all()):
        raise CheckFailed(spec["what"])


def as_complex(t: torch.Tensor) -> torch.Tensor:
    """An output pair back as the complex tensor the caller expects (a view when strides allow)."""
    if t.stride(-1) != 1 or any(s % 2 for s in t.stride()[:-1]) or t.storage_offset() % 2:
        t = t.contiguous()
    return torch.view_as_complex(t)


def as_pair(x: torch.Tensor) -> torch.Tensor:
    """A complex input as the real pairs the graph takes (a view)."""
    return torch.view_as_real(x.resolve_conj())


def bounded(specs, values: list) -> list:
    """Outputs of data-dependent size trimmed to their counts, and Python scalars read out."""
    out = list(values)
    for i, spec in enumerate(specs):
        read = spec.get("read") if isinstance(spec, dict) else spec.read
        if read == "item":
            out[i] = values[i].item()
        elif read:
            _, dim, count = read
            out[i] = values[i].narrow(dim, 0, int(values[count]))
    return out
