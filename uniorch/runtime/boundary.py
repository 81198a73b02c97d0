"""What happens to a compiled graph's outputs at the model's boundary, after the kernels ran.

Capture leaves four kinds of work there (see uniorch/capture: checks.py, complex_pairs.py,
data_dependent.py, trace.py): run-time checks, complex outputs computed as real pairs, outputs of
data-dependent size computed padded with a count, and outputs laid out unlike a contiguous tensor. Both `CapturedGraph.finish` and loaded bundles
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


def int_rows(n: int, device=None) -> torch.Tensor:
    """An int argument traced as a symbolic size, as the graph takes it: n rows, no elements
    (capture/int_sizes.py)."""
    return torch.empty((n, 0), dtype=torch.float32, device=device)


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


def laid_out(value: torch.Tensor, layout) -> torch.Tensor:
    """An output with eager's strides and storage offset (`layout`: (stride, offset), recorded at
    capture from the traced output: a transpose, a strided slice, an expand, an as_strided view, a
    pointwise op keeping its operand's order). Kernels write outputs contiguous; a caller's
    `.view`, `.as_strided` or stride check after the call must see what eager returns. A dense
    layout is a strided copy; a view with gaps or overlaps gets a storage of eager's extent, each
    element written at its offset (overlapping elements are equal values; the gaps, which hold the
    rest of eager's base, are zeros)."""
    stride, offset = tuple(layout[0]), int(layout[1])
    if tuple(value.stride()) == stride and value.storage_offset() == offset:
        return value
    shape = tuple(value.shape)
    if offset == 0 and _dense(shape, stride):
        return torch.empty_strided(shape, stride, dtype=value.dtype, device=value.device).copy_(value)
    extent = offset + 1 + sum((n - 1) * s for n, s in zip(shape, stride)) if value.numel() else 0
    storage = torch.zeros(extent, dtype=value.dtype, device=value.device)
    if value.numel() and _non_overlapping(shape, stride):
        # a strided slice (q, k and v split off one projection): written through the view, one
        # copy; positions computed with `arange` and scattered took three kernels over the whole
        # extent (H200 run 6: 0.53 ms of arange per GPT-2 training step)
        storage.as_strided(shape, stride, offset).copy_(value)
    elif value.numel():  # each element's storage position: the view's own of a storage of positions
        where = torch.arange(extent, device=value.device).as_strided(shape, stride, offset)
        storage[where.reshape(-1)] = value.reshape(-1)
    return storage.as_strided(shape, stride, offset)


def _non_overlapping(shape, stride) -> bool:
    """No two elements at one position: ordered by stride, each dim steps past the extent of the
    dims inside it (size-1 dims aside)."""
    extent = 0
    for n, s in sorted(((n, s) for n, s in zip(shape, stride) if n != 1), key=lambda d: d[1]):
        if s <= extent:
            return False
        extent += (n - 1) * s
    return True


def _dense(shape, stride) -> bool:
    """Non-overlapping and dense: a permutation of a contiguous layout (size-1 dims aside)."""
    expected = 1
    for n, s in sorted(((n, s) for n, s in zip(shape, stride) if n != 1), key=lambda d: d[1]):
        if s != expected:
            return False
        expected *= n
    return True
