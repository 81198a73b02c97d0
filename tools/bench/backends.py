"""The compilers under comparison, each behind one interface: cold-compile, then return a callable.

"Cold" means empty on-disk caches in a process that has already paid its one-time costs (imports,
C++/CUDA toolchain probing): each compile gets fresh TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR and
UNIORCH_CACHE_DIR folders and in-memory compiler caches are cleared, and one throwaway compile per
compiler runs before the first measured one. That is what a user sees compiling a new model.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .timing import wall_s

CACHE_ENV = {"inductor": "TORCHINDUCTOR_CACHE_DIR", "triton": "TRITON_CACHE_DIR", "uniorch": "UNIORCH_CACHE_DIR"}


@contextlib.contextmanager
def fresh_caches(root: str):
    """Point every compiler cache at new empty folders under `root` (kept until the run ends,
    since compiled modules may still be loaded from them), and forget in-memory caches."""
    d = tempfile.mkdtemp(dir=root)
    saved = {v: os.environ.get(v) for v in CACHE_ENV.values()}
    for sub, var in CACHE_ENV.items():
        os.environ[var] = os.path.join(d, sub)
    _reset_in_memory()
    try:
        yield
    finally:
        for var, val in saved.items():
            if val is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = val


def _reset_in_memory() -> None:
    torch.compiler.reset()
    from uniorch.backends.cpu import forget_compiled
    from uniorch.runtime.loader import forget_shared

    forget_shared()  # kernels of the same code as an earlier workload's compile again: cold
    forget_compiled()
    try:
        from torch._inductor.utils import clear_caches
        clear_caches()
    except Exception:  # noqa: BLE001 - private API; a stale in-memory cache only makes compiles look faster
        pass


@dataclass
class Backend:
    name: str
    # (model or fn, device) -> callable; called inside fresh_caches, before the timed first call
    wrap: Callable[[Any, str], Callable]
    uniorch: bool = False


def _inductor(mode: str | None):
    def wrap(fn, device):
        return torch.compile(fn, mode=mode) if mode else torch.compile(fn)
    return wrap


def _uniorch(fn, device, cuda_graphs: bool = False, freeze: bool = False):
    import uniorch
    from uniorch.backends.cpu import CpuBackend

    # CPU tensors run on the cpu backend (native code), or on the interpreter where Ascend's adapter
    # is missing; on a GPU "auto" picks the device's backend
    if device == "cpu":
        return uniorch.compile(fn, target="cpu" if CpuBackend.is_available() else "interpret",
                               cuda_graphs=cuda_graphs, freeze=freeze)
    return uniorch.compile(fn, target="auto", cuda_graphs=cuda_graphs, freeze=freeze)


class FirstCallTuned:
    """A compiled callable whose first call (the compile) runs with UNIORCH_AUTOTUNE=1, so its
    contraction kernels are tuned (uniorch/runtime/autotune.py); later calls are plain calls."""

    def __init__(self, compiled):
        self.compiled, self.tuned = compiled, False

    def __call__(self, *args, **kwargs):
        if self.tuned:
            return self.compiled(*args, **kwargs)
        old = os.environ.get("UNIORCH_AUTOTUNE")
        if old != "force":  # (force: tuned on the CPU targets too, for tests)
            os.environ["UNIORCH_AUTOTUNE"] = "1"
        try:
            return self.compiled(*args, **kwargs)
        finally:
            self.tuned = True
            if old is None:
                os.environ.pop("UNIORCH_AUTOTUNE", None)
            else:
                os.environ["UNIORCH_AUTOTUNE"] = old

    def __getattr__(self, name):  # explain, step, ... of the compiled object
        return getattr(self.compiled, name)


BACKENDS: dict[str, Backend] = {b.name: b for b in [
    Backend("eager", lambda fn, device: fn),
    Backend("inductor", _inductor(None)),
    Backend("inductor_max_autotune", _inductor("max-autotune")),
    Backend("uniorch", _uniorch, uniorch=True),
    # uniorch with its contraction tiles measured at the first call (off the CPU targets: uniorch)
    Backend("uniorch_autotune", lambda fn, device: FirstCallTuned(_uniorch(fn, device))),
    # uniorch with its launches replayed as CUDA graphs (as torch.compile's reduce-overhead)
    Backend("uniorch_graphs", lambda fn, device: _uniorch(fn, device, cuda_graphs=True), uniorch=True),
    # uniorch with the weights' layout copies made once (as Inductor's freezing; inference only)
    Backend("uniorch_frozen", lambda fn, device: _uniorch(fn, device, freeze=True), uniorch=True),
]}


def cold_compile(backend: Backend, fn, args: tuple, device: str, cache_root: str) -> tuple[Callable, float, Any]:
    """(compiled callable, seconds of its first call, first output). Eager's 'compile' is its first call."""
    with fresh_caches(cache_root):
        compiled = backend.wrap(fn, device)
        seconds, out = wall_s(lambda: compiled(*args), device)
    return compiled, seconds, out


def warm_process(names: list[str], device: str, cache_root: str) -> dict[str, str]:
    """One throwaway compile per compiler so imports and toolchain probing are not charged to the
    first workload. Returns {backend: error} for compilers that cannot work here at all."""
    x = torch.randn(4, 8, device=device)
    broken = {}
    for name in names:
        if name == "eager":
            continue
        try:
            cold_compile(BACKENDS[name], lambda t: torch.relu(t) + 1, (x,), device, cache_root)
        except Exception as e:  # noqa: BLE001 - recorded per workload; the run goes on without it
            broken[name] = short_error(e)
    return broken


def short_error(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first[:400]}"
