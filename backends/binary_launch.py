"""Running a kernel compiled ahead of time (cubin / hsaco) through the vendor driver, without Triton.

A bundle built with one Triton runs where another, or none, is installed: the binary is loaded
with the driver API (`cuda_driver`, `hip_driver`), its parameters are read from its own PTX or
AMDGCN (`kernel_abi`), its arch from its own header (`binary_arch`), and the launch passes what
the Triton that compiled it would have: uniorch's arguments, then a global scratch buffer sized
from the metadata and a null profiler buffer, on torch's current stream with num_warps * warp
size threads per block and the metadata's shared memory.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Callable, Optional

from .binary_arch import binary_arch, check_runs_on
from .kernel_abi import ABI, bind, parse_amdgcn, parse_ptx
from .sdk import BackendError, CompiledKernel, tensor_args
from .specialization import accepts


@dataclass(frozen=True)
class Vendor:
    binary: str  # the stage holding the binary
    abi_text: str  # the stage whose text declares its parameters
    parse: Callable[[str, str], ABI]
    driver: str  # module whose driver() binds the vendor's library


VENDORS = {"cuda": Vendor("cubin", "ptx", parse_ptx, "cuda_driver"),
           "rocm": Vendor("hsaco", "amdgcn", parse_amdgcn, "hip_driver")}


def device_arch(vendor: str, index: int) -> str:
    """The arch of torch's device `index`, in the form `binary_arch` compares with."""
    import torch

    if vendor == "cuda":
        major, minor = torch.cuda.get_device_capability(index)
        return f"sm_{major}{minor}"
    return torch.cuda.get_device_properties(index).gcnArchName.split(":")[0]


class DriverLauncher:
    """A `Launcher` for one compiled kernel. Constructing it reads and checks everything the launch
    needs (no device or driver involved); the module loads on the first launch on each device."""

    def __init__(self, compiled: CompiledKernel, vendor: str, driver=None,
                 specialized: Optional[CompiledKernel] = None):
        if vendor not in VENDORS:
            raise BackendError(f"no driver launcher for '{vendor}'; known: {', '.join(VENDORS)}")
        spec = VENDORS[vendor]
        ks, meta = compiled.source, compiled.metadata
        self.kernel = ks
        self.vendor = vendor
        self.name = meta.get("name") or ks.fn_name
        for stage in (spec.binary, spec.abi_text):
            if stage not in compiled.asm:
                raise BackendError(f"kernel {compiled.name} was compiled without its '{stage}' stage, which the driver "
                                   f"launcher needs")
        self.binary = compiled.asm[spec.binary]
        if not isinstance(self.binary, bytes):
            raise BackendError(f"kernel {compiled.name}: its '{spec.binary}' stage is not a binary")
        self.arch = binary_arch(vendor, self.binary, compiled.asm)
        self.abi = spec.parse(compiled.asm[spec.abi_text], self.name)
        self.binding = bind(ks, meta, self.abi)
        warp = meta.get("warp_size") or (meta.get("target") or {}).get("warp_size")
        if not warp:
            raise BackendError(f"kernel {compiled.name}: its metadata has no warp_size")
        self.block = int(meta.get("num_warps", ks.num_warps)) * int(warp)
        bound = self.abi.max_block
        if bound is not None and (self.block != bound if self.abi.exact_block else self.block > bound):
            raise BackendError(f"kernel {compiled.name}: launching {self.block} threads per block "
                               f"(num_warps x warp size), but its binary was compiled for "
                               f"{'exactly' if self.abi.exact_block else 'at most'} {bound}")
        self.shared = int(meta.get("shared") or 0)
        self.num_ctas = int(meta.get("num_ctas") or 1)
        self.cooperative = bool(meta.get("launch_cooperative_grid"))
        self.pdl = bool(meta.get("launch_pdl"))
        self.scratch_size = int(meta.get("global_scratch_size") or 0)
        self.scratch_align = max(1, int(meta.get("global_scratch_align") or 1))
        if int(meta.get("profile_scratch_size") or 0):
            raise BackendError(f"kernel {compiled.name} was compiled with profiler instrumentation (it needs a "
                               f"profile scratch buffer); compile it again without instrumentation")
        # symbolic sizes (uniorch/ir/dims.py): the grid is evaluated per launch
        grid = tuple(1 if isinstance(g, str) else int(g) for g in ks.grid)
        if not 1 <= len(grid) <= 3:
            raise BackendError(f"kernel {compiled.name}: grid {grid} is not 1 to 3 dimensions")
        self.grid = grid + (1,) * (3 - len(grid))
        self._driver = driver
        self._loaded: dict[int, object] = {}
        self._lock = threading.Lock()
        # the same kernel compiled for the arguments the AOT compile recorded (backends/specialization.py):
        # launched instead whenever a launch's arguments have that specialization
        self.specialized: Optional[DriverLauncher] = None
        self.launches = 0  # launches of this form (the GPU run reports how many were specialized)
        if specialized is not None:
            self.specialized = DriverLauncher(specialized, vendor, driver)
            self.spec = list(specialized.source.specialization)

    def pick(self, inputs: list, outputs: list, sizes: list | None = None) -> "DriverLauncher":
        """The launcher for these arguments: the specialized kernel where they match it."""
        return self._pick(self._raw(inputs, outputs, sizes))

    def _pick(self, raw: list) -> "DriverLauncher":
        if self.specialized is not None and accepts(self.spec, raw):
            return self.specialized
        return self

    def _raw(self, inputs: list, outputs: list, sizes: list | None) -> list[int]:
        """The runtime arguments as integers (tensors as their addresses), as the binary takes them."""
        return [a.data_ptr() if hasattr(a, "data_ptr") else int(a)
                for a in tensor_args(self.kernel, inputs, outputs, sizes)]

    def check_device(self, arch: str) -> None:
        check_runs_on(self.vendor, self.name, self.arch, arch)
        if self.specialized is not None:
            self.specialized.check_device(arch)

    def driver(self):
        if self._driver is None:
            import importlib

            self._driver = importlib.import_module(f"{__package__}.{VENDORS[self.vendor].driver}").driver()
        return self._driver

    def _function(self, index: int):
        fn = self._loaded.get(index)
        if fn is None:
            with self._lock:
                fn = self._loaded.get(index)
                if fn is None:
                    import torch

                    torch.cuda.init()  # the driver library and the device's primary context, as torch uses them
                    self.check_device(device_arch(self.vendor, index))
                    fn = self.driver().load(self.binary, self.name, index, self.block, self.shared, self.num_ctas)
                    self._loaded[index] = fn
        return fn

    def _device(self, tensors: list) -> int:
        index: Optional[int] = None
        for t in tensors:
            if t.device.type != "cuda":
                raise BackendError(f"kernel {self.name}: a tensor argument is on {t.device}, not on the GPU")
            if index is None:
                index = t.device.index
            elif t.device.index != index:
                raise BackendError(f"kernel {self.name}: tensor arguments are on cuda:{index} and {t.device}")
        if index is None:
            import torch

            index = torch.cuda.current_device()
        return index

    def arguments(self, inputs: list, outputs: list, extras: dict[str, int],
                  sizes: list | None = None, raw: list | None = None) -> tuple[ctypes.Array, ctypes.Array]:
        """The argument buffer and the `void*[]` of pointers into it that the driver takes (`raw`:
        the runtime arguments already read off the tensors, `_raw`)."""
        args = raw if raw is not None else self._raw(inputs, outputs, sizes)
        data = self.binding.pack(self.binding.values(args, extras))
        storage = (ctypes.c_uint64 * max(1, -(-self.binding.size // 8)))()  # 8-byte aligned host copy
        ctypes.memmove(storage, data, len(data))
        base = ctypes.addressof(storage)
        params = (ctypes.c_void_p * max(1, len(self.binding.slots)))(*[base + o for o in self.binding.offsets])
        return storage, params

    def bind(self, inputs: list, outputs: list) -> Optional[Callable]:
        """`(stream, *inputs, *outputs) -> None`: this launch for later calls whose tensors have
        these tensors' strides, alignment and device (runtime/bound_launch.py): the form
        (specialized or not), the module, the grid and the argument buffer's layout chosen once,
        with each tensor's address and the stream filled in per launch. None for kernels with
        size symbols or a global scratch buffer (sized per launch), which launch the usual way."""
        import struct

        import torch

        ks = self.kernel
        if ks.symbols:
            return None
        raw = self._raw(inputs, outputs, None)
        form = self._pick(raw)
        if form.scratch_size:
            return None
        tensors = list(inputs) + list(outputs)
        index = form._device(tensors)
        fn = form._function(index)
        extras = {"global_scratch": 0, "profile_scratch": 0}
        values = form.binding.values(raw, extras)
        form.binding.pack(values)  # checks each value once, alignment included
        # runtime argument index of each tensor's address (`tensor_args`: a tensor, then its strides)
        at, where = 0, {}
        for n, t in enumerate(tensors):
            where[at] = n
            at += 1 + t.dim()
        slots = [(j, where[s.source]) for j, s in enumerate(form.binding.slots)
                 if isinstance(s.source, int) and s.source in where]
        fmt, size, offsets = form.binding._format, form.binding.size, form.binding.offsets
        words = max(1, -(-size // 8))
        nparams = max(1, len(offsets))
        launch_ = form.driver().launch
        grid, block, shared = form.grid, form.block, form.shared
        options = dict(num_ctas=form.num_ctas, cooperative=form.cooperative, pdl=form.pdl)
        empty = grid[0] * grid[1] * grid[2] == 0

        def launch(stream, *ts):
            if empty:  # no programs: nothing to launch
                return
            vals = list(values)
            for j, n in slots:
                vals[j] = ts[n].data_ptr()
            storage = (ctypes.c_uint64 * words)()  # per launch: calls from two threads never share it
            struct.pack_into(fmt, storage, 0, *vals)
            base = ctypes.addressof(storage)
            params = (ctypes.c_void_p * nparams)(*[base + o for o in offsets])
            form.launches += 1
            launch_(fn, grid, block, shared, stream, params, **options)

        launch.stream = lambda: torch.cuda.current_stream(index).cuda_stream
        return launch

    def __call__(self, inputs: list, outputs: list, sizes: list | None = None) -> None:
        """`sizes`: the values of the kernel's size symbols, when it has any (else read off the tensors)."""
        raw = self._raw(inputs, outputs, sizes)  # read once: for the choice and for the launch
        self._pick(raw)._launch(inputs, outputs, sizes, raw)

    def _launch(self, inputs: list, outputs: list, sizes: list | None, raw: list) -> None:
        import torch

        self.launches += 1

        tensors = list(inputs) + list(outputs)
        index = self._device(tensors)
        fn = self._function(index)
        extras = {"global_scratch": 0, "profile_scratch": 0}
        scratch = None
        ks = self.kernel
        grid = self.grid
        if ks.symbols:
            grid = ks.launch_grid(ks.size_args(inputs, outputs, sizes))
            grid = grid + (1,) * (3 - len(grid))
        programs = grid[0] * grid[1] * grid[2]
        if programs == 0:
            return
        if self.scratch_size:
            # per program (and per CTA of a cluster), as Triton's launcher allocates it; on the launch
            # stream, so the caching allocator reuses it only after this kernel
            nbytes = programs * self.num_ctas * self.scratch_size + self.scratch_align
            scratch = torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", index))
            extras["global_scratch"] = -(-scratch.data_ptr() // self.scratch_align) * self.scratch_align
        storage, params = self.arguments(inputs, outputs, extras, sizes, raw)
        stream = torch.cuda.current_stream(index).cuda_stream
        self.driver().launch(fn, grid, self.block, self.shared, stream, params, num_ctas=self.num_ctas,
                             cooperative=self.cooperative, pdl=self.pdl)
        del storage, params, scratch


__all__ = ["DriverLauncher", "VENDORS", "device_arch"]
