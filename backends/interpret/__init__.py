"""The `interpret` backend: kernels run on the CPU through Triton's interpreter.

Every kernel is numerically checked by this backend on machines without a GPU (CI). Its stages
stop at TTIR (from Triton's front end for NVIDIA sm_90, which is vendor-neutral at that level);
what runs is the generated source, so an ahead-of-time bundle needs only the "triton" stage.
"""
from __future__ import annotations

from ..sdk import Backend, CompiledKernel, Launcher
from ..triton_launch import TritonLauncher


def prepare_interpreter() -> None:
    """Triton's interpreter as uniorch runs kernels on it, set before the first kernel (each step
    applies once per process): repairs of its bugs (fixes.py), reductions and scans with user
    combines a vector at a time (vector_reduce.py), no overflow checks whose result it drops
    unless debugging (unchecked_overflow.py)."""
    from . import fixes, unchecked_overflow, vector_reduce

    fixes.apply()
    vector_reduce.apply()
    unchecked_overflow.apply()


class InterpretBackend(Backend):
    name = "interpret"
    archs = ("cpu",)
    warp_size = 32
    device_type = "cpu"

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def unavailable_reason(cls) -> str:
        return ""

    def load(self, kernel) -> Launcher:
        from uniorch.runtime import loader

        return TritonLauncher(kernel, loader.load(kernel, interpret=True))

    def load_compiled(self, compiled: CompiledKernel) -> Launcher:
        return self.load(compiled.source)
