"""The backend plugin SDK: what a vendor implements to put uniorch's kernels on its hardware.

A backend takes every kernel from Triton-IR (TTIR, vendor-neutral) through its own ordered stages,
the way Triton's backends do: `add_stages(stages, options)` fills an ordered dict
`{stage_name: fn(module_or_text, metadata) -> next}`. The driver (`uniorch.backends.driver`) runs
the stages, keeps every stage's output in `CompiledKernel.asm`, and can stop after any stage, so
dumps (`uniorch-opt --dump-dir`) and ahead-of-time bundles need nothing from the backend beyond
this. Running kernels is the other half: `load()` turns a generated kernel, or one compiled ahead
of time, into a `Launcher`.

Backends are found through the `uniorch.backends` entry-point group (see `registry`); the
built-ins register the same way. docs/backend_guide.md walks a vendor engineer through writing one.
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional, Protocol

from uniorch.errors import UniorchError


class BackendError(UniorchError):
    """A backend cannot do what was asked (not installed, no device, a stage failed)."""


@dataclass(frozen=True)
class KernelOptions:
    """Per-kernel compile options every backend understands; a backend may subclass (frozen)."""

    num_warps: int = 4
    num_stages: int = 1

    def hash(self) -> str:
        text = repr(sorted(dataclasses.asdict(self).items()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class CompiledKernel:
    """One kernel after the backend's stages.

    `asm` maps stage name to its output (text, or bytes for binaries), starting with "triton"
    (the generated source) and "ttir". `metadata` is what the stages recorded (JSON-able), e.g.
    Triton's kernel name, shared memory and target. `source` is the uniorch `KernelSource` (how
    to launch: argument order, grid, constexprs).
    """

    name: str
    target: str
    source: Any  # uniorch.codegen.KernelSource
    asm: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def stages(self) -> list[str]:
        return list(self.asm)


class Launcher(Protocol):
    """Runs one kernel: `launcher(inputs, outputs, sizes=None)` with torch tensors on the backend's
    device. `sizes` holds the values of the kernel's size symbols (`kernel.symbols`) when it was
    compiled with symbolic sizes (`dynamic=True`, a second batch size, training, generate), else
    None. `launch_grid` and `tensor_args` give the grid and the arguments in both cases."""

    def __call__(self, inputs: list, outputs: list, sizes: Optional[list] = None) -> None: ...


class Backend:
    """Base class of every backend. Subclasses set the class attributes and override the methods.

    name          vendor name, the part of a target string before ':' ("cuda", "rocm", ...)
    archs         architectures it can compile for; the first is the default
    warp_size     threads that run in lockstep (32 for NVIDIA warps, 64 for AMD CDNA wavefronts)
    binary_stage  the stage whose output `load_compiled` runs (e.g. "cubin"); None if none
    device_type   torch device type its kernels run on ("cuda", "cpu", "npu", ...)
    options_class frozen dataclass of its compile options (KernelOptions or a subclass)
    """

    name: ClassVar[str] = ""
    archs: ClassVar[tuple[str, ...]] = ()
    warp_size: ClassVar[int] = 32
    binary_stage: ClassVar[Optional[str]] = None
    device_type: ClassVar[str] = "cpu"
    options_class: ClassVar[type] = KernelOptions
    # archs accepted besides `archs` (e.g. any sm_NN for cuda); a regex, or None for none
    arch_pattern: ClassVar[Optional[str]] = None
    # whether target="auto" may pick it when available; False for simulators and examples that
    # are always "available" but are not the machine's accelerator
    auto_select: ClassVar[bool] = True
    # whether compile_aot also compiles each kernel specialized for its recorded arguments, and
    # `load_compiled` takes it (`specialized=`) to launch where the arguments match
    # (backends/specialization.py): for Triton's GPU targets, whose JIT specializes the same way
    specializes_aot: ClassVar[bool] = False
    # whether `compile_aot` may run its stages for several kernels at once, in threads (each call
    # keeps to its own kernel and its own files): Triton's GPU stages release the GIL in their
    # MLIR passes and ptxas; a plugin's external tools may not tolerate it, so it is opt-in
    compiles_in_threads: ClassVar[bool] = False
    # whether kernels that are the same code but for their names (a model's repeated layers) may
    # share one compile: the binary keeps the first kernel's name, which `load_compiled` must
    # launch by (its metadata's). Not where files are named per kernel for a toolchain to build
    shares_kernels: ClassVar[bool] = False

    def __init__(self, arch: Optional[str] = None):
        self.arch = arch or self.default_arch()

    # -- what it is -------------------------------------------------------------------------
    @classmethod
    def default_arch(cls) -> str:
        """The architecture a bare vendor name means: the present device's when one is found."""
        present = cls.present_arch()
        return present or cls.archs[0]

    @classmethod
    def present_arch(cls) -> Optional[str]:
        """The architecture of the device on this machine, or None."""
        return None

    @classmethod
    def is_available(cls) -> bool:
        """True when kernels can run here (toolchain and device present)."""
        return False

    @classmethod
    def unavailable_reason(cls) -> str:
        """Why `is_available()` is False, naming what is missing."""
        return f"no {cls.name} device on this machine"

    def triton_target(self):
        """Triton's GPUTarget whose front end produces this backend's TTIR.

        TTIR is vendor-neutral except for a few target-dependent lowerings (e.g. which dot
        instructions exist); backends without a Triton backend of their own use NVIDIA's sm_90."""
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    # -- compiling --------------------------------------------------------------------------
    def parse_options(self, opts: dict) -> KernelOptions:
        fields = {f.name for f in dataclasses.fields(self.options_class)}
        return self.options_class(**{k: v for k, v in opts.items() if k in fields and v is not None})

    def add_stages(self, stages: dict[str, Callable[[Any, dict], Any]], options: KernelOptions) -> None:
        """Fill `stages` with this backend's ordered stages after "ttir"; none by default."""

    def handoff_files(self, compiled: CompiledKernel, linalg: str = "") -> dict[str, str]:
        """Files, by name, that a toolchain outside uniorch takes in for this kernel (written into
        AOT bundles under handoff/<kernel>/ and by `uniorch-opt --dump-dir`); none by default."""
        return {}

    def handoff_bundle_files(self, compiled: list) -> dict[str, str]:
        """Files, by name, for a bundle's whole hand-off (under handoff/, beside each kernel's
        folder): a build script running every kernel's remaining commands; none by default."""
        return {}

    # -- running ----------------------------------------------------------------------------
    def load(self, kernel) -> Launcher:
        """A launcher for a freshly generated `KernelSource` (compile now, on this machine)."""
        raise BackendError(f"backend '{self.name}' cannot run kernels: {self.unavailable_reason()}")

    def prepare(self, kernels: list) -> None:
        """Called with a graph's `KernelSource`s before `load` is called for each, in turn: a
        backend may compile them ahead, all at once (the cpu backend, in worker processes). A
        failure here must leave `load` to raise it, with the kernel's name."""

    def load_compiled(self, compiled: CompiledKernel) -> Launcher:
        """A launcher for a kernel compiled earlier (ahead of time), without recompiling it."""
        raise BackendError(f"backend '{self.name}' cannot run kernels: {self.unavailable_reason()}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}:{self.arch}>"


def tensor_args(kernel, inputs: list, outputs: list, sizes: list | None = None) -> list:
    """The runtime arguments of a uniorch kernel: per tensor its pointer, then its strides; then
    the values of its size symbols, if it has any."""
    args = []
    for t in list(inputs) + list(outputs):
        args.append(t)
        args.extend(t.stride())
    return args + kernel.size_args(inputs, outputs, sizes) if getattr(kernel, "symbols", None) else args


def availability(cls) -> tuple[bool, str]:
    """(whether `cls` runs kernels here, why not): a plugin's probe that raises (its driver
    library missing) reads as unavailable, the exception its reason, rather than escaping from
    `uniorch.compile` or `uniorch.load`."""
    try:
        if cls.is_available():
            return True, ""
        return False, str(cls.unavailable_reason())
    except Exception as err:  # noqa: BLE001 - the plugin's code
        return False, f"{cls.__qualname__}'s availability check raised {type(err).__name__}: {err}"


def torch_device(backend) -> "torch.device":
    """The torch device a backend's kernels run on; a device type this torch does not know (an
    accelerator whose PyTorch extension is not installed) is a BackendError naming it."""
    import torch

    try:
        return torch.device(backend.device_type)
    except RuntimeError as err:
        raise BackendError(f"backend '{backend.name}' runs on device type '{backend.device_type}', which this "
                           f"PyTorch does not know (is its PyTorch extension installed?): {err}") from None


def launch_grid(kernel, inputs: list, outputs: list, sizes: list | None = None) -> tuple:
    """The launch grid of one call: `kernel.grid` is an expression of the size symbols in a kernel
    compiled with symbolic sizes (`("ceiling(s10/16)", 1, 1)`), evaluated here for this call."""
    if getattr(kernel, "symbols", None):
        return kernel.launch_grid(kernel.size_args(inputs, outputs, sizes))
    return tuple(kernel.grid)


__all__ = ["Backend", "BackendError", "CompiledKernel", "KernelOptions", "Launcher", "availability", "launch_grid",
           "tensor_args", "torch_device"]
