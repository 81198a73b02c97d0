"""A template uniorch backend: copy this package to put uniorch's kernels on your hardware.

It is a real backend, not a mock: `uniorch.compile(model, target="example")` runs every kernel on
the CPU through Triton's interpreter, and `uniorch.backends.driver.compile_kernel` takes every
kernel through two stages of its own after TTIR (stages.py): re-parsing and verifying the TTIR as
a vendor toolchain reading a file would, then a per-kernel instruction summary. Replace the
stages with your compiler's (TTIR → your IR → your binary) and the launcher with your runtime's.

What uniorch gives a backend, per kernel (docs/backend_guide.md, docs/kernels.md):
  * TTIR (Triton-IR) from Triton's own front end: the first input of `add_stages`' stages;
  * a `KernelSource`: the generated Triton source and how to launch it (argument order: per
    tensor its pointer then one stride per dimension; grid; constexpr block sizes).
"""
from __future__ import annotations

from dataclasses import dataclass
from uniorch.backends.sdk import Backend, BackendError, CompiledKernel, KernelOptions, Launcher

from . import stages
from .launcher import InterpreterLauncher


# Options: a frozen dataclass, so it hashes; the driver puts `options.hash()` into the on-disk
# cache key, so changing an option recompiles instead of reusing stale stage outputs. Subclass
# KernelOptions to keep the fields every backend understands (num_warps, num_stages).
@dataclass(frozen=True)
class ExampleOptions(KernelOptions):
    # The summary stage refuses kernels with more TTIR ops than this: how a backend turns a
    # hardware limit (instruction memory, registers) into a clear compile error.
    max_ops: int = 50_000
    # Whether the check stage runs the MLIR verifier on the re-parsed module (cheap; keep on).
    verify: bool = True


class ExampleBackend(Backend):
    # The vendor name: the part of target strings before ':'; must equal the entry-point name.
    name = "example"
    # Architectures it compiles for; the first is the default (`target="example"`).
    archs = ("cpu",)
    # Threads that run in lockstep; codegen sizes blocks with it. The interpreter has no warps,
    # 32 keeps Triton's front end (NVIDIA sm_90 by default, see Backend.triton_target) happy.
    warp_size = 32
    # Torch device the kernels' tensors live on; the runtime allocates buffers there.
    device_type = "cpu"
    options_class = ExampleOptions
    # Always available on any CPU, so keep target="auto" from choosing it over the real device
    # (or over the built-in interpreter); a real accelerator backend leaves this True.
    auto_select = False
    # No binary: load_compiled reruns the generated source (stage "triton") in the interpreter.
    binary_stage = None

    @classmethod
    def is_available(cls) -> bool:
        # Must never raise (target="auto" probes every backend); check your driver/device here.
        try:
            import triton.runtime.interpreter  # noqa: F401
        except Exception:  # noqa: BLE001
            return False
        return True

    @classmethod
    def unavailable_reason(cls) -> str:
        # Name what is missing, so users know what to install.
        return "" if cls.is_available() else "Triton's interpreter (triton.runtime.interpreter) is not importable"

    def add_stages(self, stages_: dict, options: ExampleOptions) -> None:
        # Ordered: each function gets the previous stage's output (first: the TTIR module) and a
        # metadata dict it may add JSON-able facts to. Every output is kept (CompiledKernel.asm),
        # cached on disk, dumped by `uniorch-opt --dump-dir` and saved in AOT bundles.
        stages_["ttir_checked"] = lambda src, metadata: stages.check_ttir(src, metadata, options)
        stages_["summary"] = lambda src, metadata: stages.summarize(src, metadata, options)

    def load(self, kernel) -> Launcher:
        # A freshly generated KernelSource, compiled on this machine: here, interpreted.
        if not self.is_available():
            raise BackendError(f"target 'example' cannot run kernels: {self.unavailable_reason()}")
        return InterpreterLauncher(kernel)

    def load_compiled(self, compiled: CompiledKernel) -> Launcher:
        # A kernel compiled earlier (an AOT bundle). A GPU backend would load
        # compiled.asm[self.binary_stage]; the interpreter only needs the source.
        return self.load(compiled.source)


__all__ = ["ExampleBackend", "ExampleOptions"]
