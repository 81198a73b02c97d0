"""What the NVIDIA and AMD backends share: Triton compiles both, so their stages are Triton's.

A subclass names its Triton GPUTarget and how to find its device; everything else (stages from
TTIR to the binary, JIT launch, launch of an ahead-of-time binary) is the same code path. Freshly
generated kernels run through Triton's JIT; binaries compiled earlier run through the vendor driver
(`binary_launch`), so a bundle needs no Triton, or not the one that built it, where it runs.
"""
from __future__ import annotations

from typing import ClassVar, Optional

from .sdk import Backend, BackendError, CompiledKernel, Launcher
from .triton_launch import TritonLauncher


class TritonGPUBackend(Backend):
    triton_backend: ClassVar[str] = ""  # Triton's name for it: "cuda" | "hip"
    specializes_aot = True
    compiles_in_threads = True
    shares_kernels = True

    def triton_target(self):  # pragma: no cover - subclasses
        raise NotImplementedError

    def add_stages(self, stages, options) -> None:
        from triton.compiler.compiler import make_backend
        from triton.backends.compiler import Language

        from .driver import TRITON_PINNED

        tb = make_backend(self.triton_target())
        topts = tb.parse_options({"num_warps": options.num_warps, "num_stages": options.num_stages, **TRITON_PINNED})
        theirs: dict = {}
        tb.add_stages(theirs, topts, Language.TRITON)
        for name, fn in theirs.items():
            if name != "ttir":  # the driver's front end already ran Triton's TTIR passes
                stages[name] = fn

    @classmethod
    def _torch_device_kind(cls) -> Optional[str]:
        """'cuda' or 'hip' when torch sees a GPU of that kind, else None."""
        import torch

        if not torch.cuda.is_available():
            return None
        return "hip" if getattr(torch.version, "hip", None) else "cuda"

    @classmethod
    def is_available(cls) -> bool:
        return cls._torch_device_kind() == cls.triton_backend and cls.present_arch() is not None

    def _check_runnable(self) -> None:
        if not self.is_available():
            raise BackendError(f"target '{self.name}:{self.arch}' cannot run kernels here: {self.unavailable_reason()}")
        present = self.present_arch()
        if present != self.arch:
            raise BackendError(f"target '{self.name}:{self.arch}' cannot run here: the device present is "
                               f"{self.name}:{present}; compile for it, or use compile_aot for {self.arch}")

    def load(self, kernel) -> Launcher:
        from uniorch.runtime import loader

        self._check_runnable()
        return TritonLauncher(kernel, loader.load(kernel, interpret=False))

    def load_compiled(self, compiled: CompiledKernel, specialized: Optional[CompiledKernel] = None) -> Launcher:
        from .binary_launch import DriverLauncher

        self._check_runnable()
        launcher = DriverLauncher(compiled, self.name, specialized=specialized)
        launcher.check_device(self.present_arch())
        return launcher
