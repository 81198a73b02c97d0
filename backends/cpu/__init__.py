"""The `cpu` backend: uniorch's kernels as native code, through Ascend's own lowering.

Stages after TTIR:
  ttadapter  Ascend's triton-adapter-opt (`backends/triton_adapter.py`), the same passes and
             flags the `cann` backend runs (named-ops=True: the adapter fails on some reductions
             with named-ops=False), printed in MLIR's generic form, which torch-mlir's newer MLIR
             parses (the custom syntax of some ops changed since the adapter's MLIR)
  llmlir     that linalg bufferized and lowered to the LLVM dialect with upstream passes through
             torch-mlir's bindings, plus a grid function (`lowering.py`)
The LLVM dialect is JIT-compiled by MLIR's ExecutionEngine and called in this process, the grid
split over threads (`launch.py`). So every run on `cpu` checks Ascend's lowering of uniorch's
kernels numerically.

A kernel this path cannot take (the adapter rejects it, a pass fails, the JIT fails) runs on
Triton's interpreter instead, with a `CpuFallbackWarning` naming the kernel and the reason;
`fallbacks()` lists them, and `explain()` under "kernels the target runs another way". The result
stays right; only that kernel is slow.
"""
from __future__ import annotations

import re
import warnings

from .. import triton_adapter
from ..sdk import Backend, BackendError, CompiledKernel, KernelOptions, Launcher
from . import lowering

ABI_KEY, ENTRY_KEY, SERIAL_KEY = "uniorch_cpu_abi", "uniorch_entry", "uniorch_cpu_serial"


def _sources_hash() -> str:
    """The stages' own code, in the driver's cache key: a change to the lowering (or to a module
    it calls: bf16_storage, libm_calls, runtime_calls) recompiles."""
    import hashlib
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    stages = [os.path.join(here, n) for n in ("lowering.py", "bf16_storage.py", "libm_calls.py", "runtime_calls.py")]
    for path in (*stages, os.path.join(os.path.dirname(here), "triton_adapter.py")):
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]
_fallbacks: dict[str, str] = {}


class CpuFallbackWarning(UserWarning):
    pass


def fallbacks() -> dict[str, str]:
    """Kernels of this process that run on the interpreter instead, by name, with the reason."""
    return dict(_fallbacks)


# a model's repeated layers: one compile for kernels that are the same code (`shares_kernels`)
_compiled: dict = {}


def forget_compiled() -> None:
    """The kernels compiled so far are not reused by later kernels of the same code (a cold compile)."""
    _compiled.clear()


class CpuBackend(Backend):
    name = "cpu"
    archs = ("host",)
    warp_size = 32  # TTIR from Triton's sm_90 front end, as for every backend without its own
    device_type = "cpu"
    options_class = KernelOptions
    stages_version = _sources_hash()
    shares_kernels = True  # the launcher calls the entry its metadata names

    @classmethod
    def is_available(cls) -> bool:
        return not cls.unavailable_reason()

    @classmethod
    def unavailable_reason(cls) -> str:
        why = triton_adapter.missing_reason()
        if why:
            return why
        try:
            from torch_mlir import execution_engine  # noqa: F401
        except ImportError as err:
            return f"torch-mlir's ExecutionEngine is not importable ({err})"
        return ""

    def add_stages(self, stages, options) -> None:
        from ..cann.handoff import entry_name

        def make_ttadapter(src, metadata):
            ttir = str(src)
            entry = entry_name(ttir)
            metadata[ENTRY_KEY] = entry
            # the adapter lowers Triton's atomics to plain read-modify-writes (measured: a
            # scatter_add split over threads lost updates), exact only if programs run one by one
            metadata[SERIAL_KEY] = bool(re.search(r"\btt\.atomic_", ttir))
            linalg = triton_adapter.run(ttir, entry, options, named_ops=True, generic=True)
            metadata[ABI_KEY] = lowering.kernel_abi(linalg, entry)
            return linalg

        def make_llmlir(src, metadata):
            return lowering.to_llvm(str(src), metadata[ENTRY_KEY])

        stages["ttadapter"] = make_ttadapter
        stages["llmlir"] = make_llmlir

    def prepare(self, kernels: list) -> None:
        from ..driver import sharing_key
        from .compile_pool import compile_ahead

        compile_ahead([k for k in kernels if (self.arch, sharing_key(k)) not in _compiled], self)

    def load(self, kernel) -> Launcher:
        from ..driver import compile_kernel, shared_as, sharing_key

        key = (self.arch, sharing_key(kernel)) if self.shares_kernels else None
        try:
            compiled = _compiled.get(key)
            if compiled is None:
                compiled = compile_kernel(kernel, self)
                if key is not None:
                    _compiled[key] = compiled
            return self.load_compiled(shared_as(compiled, kernel))
        except BackendError as err:
            return self._interpreted(kernel, str(err))

    def load_compiled(self, compiled: CompiledKernel) -> Launcher:
        from .launch import CpuLauncher

        if "llmlir" not in compiled.asm:
            raise BackendError(f"kernel {compiled.name} was compiled without its 'llmlir' stage")
        return CpuLauncher(compiled.source, compiled.asm["llmlir"], compiled.metadata[ENTRY_KEY],
                           compiled.metadata[ABI_KEY], serial=bool(compiled.metadata.get(SERIAL_KEY, True)))

    def _interpreted(self, kernel, why: str) -> Launcher:
        from ..interpret import InterpretBackend

        _fallbacks[kernel.name] = why
        warnings.warn(f"uniorch cpu: kernel {kernel.name} runs on Triton's interpreter: {why}", CpuFallbackWarning,
                      stacklevel=3)
        launcher = InterpretBackend("cpu").load(kernel)
        launcher.note = f"runs on Triton's interpreter: {why}"  # explain() lists it
        return launcher


__all__ = ["CpuBackend", "CpuFallbackWarning", "fallbacks", "forget_compiled"]
