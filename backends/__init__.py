"""Vendor backends and the plugin SDK (docs/design.md).

    from uniorch.backends import Backend, get_backend, list_backends

Built-in: `interpret` (Triton's interpreter on the CPU), `cuda` (PTX/cubin), `rocm` (AMDGCN/HSACO),
`cann` (Ascend's adapter, then a hand-off to the CANN toolkit), `cpu` (the adapter's linalg lowered
with MLIR and run natively). More come from plugins: entry points in the `uniorch.backends` group.
"""
from __future__ import annotations

from .sdk import Backend, BackendError, CompiledKernel, KernelOptions, Launcher


def get_backend(target) -> Backend:
    """The backend instance for a target string or `Target` (e.g. "cuda:sm_90")."""
    from uniorch.targets import parse_target

    t = parse_target(target)
    from .registry import get

    return get(t.vendor)(t.arch)


def list_backends() -> dict:
    from .registry import backends

    return dict(backends())


__all__ = ["Backend", "BackendError", "CompiledKernel", "KernelOptions", "Launcher", "get_backend", "list_backends"]
