"""Running a kernel lowered by `lowering.py`: JIT-compiled by MLIR's ExecutionEngine (torch-mlir's
bindings), called in this process through its packed interface (`void f(void **args)`), the grid
split over threads.

The ExecutionEngine's packed wrapper takes one pointer per LLVM argument; a memref<?xT> argument
is five of them (allocated pointer, aligned pointer, offset, size, stride), as MLIR's memref
descriptor lays it out. The kernel addresses a tensor only through `memref.reinterpret_cast`
with the strides uniorch passes, so the descriptor is the tensor's first element with offset 0,
the elements its view spans (the lowering clamps loads into that size) and stride 1. ctypes
releases the GIL during the call, so threads run programs of the grid in parallel.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import torch

from ..sdk import BackendError, tensor_args
from . import object_cache
from .lowering import grid_name

# Threads pay off once a launch moves this many bytes (measured: below it, handing programs to a
# pool costs more than the programs themselves).
PARALLEL_BYTES = 1 << 18

_engines: dict[str, tuple] = {}
# where this process's kernels came from: "library" (linked by an earlier process) or "engine"
compiled_by: Counter = Counter()
_engines_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def threads() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=threads(), thread_name_prefix="uniorch-cpu")
    return _pool


def engine(llvm_text: str, entry: str):
    """(what keeps the code loaded, the grid function's packed entry), compiled once per process
    per text: a library an earlier process linked (`object_cache.py`), else MLIR's engine."""
    key = hashlib.sha256(llvm_text.encode()).hexdigest()
    with _engines_lock:
        hit = _engines.get(key)
        if hit is not None:
            return hit
        disk = object_cache.key(llvm_text)
        # `jit`'s raw_lookup finds the packed wrapper MLIR emits for the grid function, `_mlir_<name>`
        loaded = object_cache.load(disk, "_mlir_" + grid_name(entry))
        if loaded is not None:
            lib, address = loaded
            fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)
            _engines[key] = (lib, fn)
            compiled_by["library"] += 1
            return _engines[key]
        context, ee, module, address = jit(llvm_text, entry)
        object_cache.store(ee, disk)
        compiled_by["engine"] += 1
        fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)
        _engines[key] = ((context, ee, module), fn)  # the context and module outlive the engine's code
        return _engines[key]


def jit(llvm_text: str, entry: str) -> tuple:
    """(context, engine, module, the grid function's packed entry) by MLIR's ExecutionEngine, with
    its object file kept for `object_cache.store`."""
    from torch_mlir import ir
    from torch_mlir.execution_engine import ExecutionEngine

    context = ir.Context()
    with context:
        module = ir.Module.parse(llvm_text)
        try:
            ee = ExecutionEngine(module, opt_level=3, enable_object_dump=True)
            ee.initialize()
        except Exception as err:  # noqa: BLE001
            raise BackendError(f"kernel {entry}: MLIR's ExecutionEngine could not compile it: {err}") from None
        address = ee.raw_lookup(grid_name(entry))
    if not address:
        raise BackendError(f"kernel {entry}: no {grid_name(entry)} in the JIT-compiled module")
    return context, ee, module, address


_FLOATS = {"f32": ctypes.c_float, "f64": ctypes.c_double}
_INTS = {"i64", "i32", "i16", "i8", "i1", "index"}


class CpuLauncher:
    """Calls one kernel's grid function with a uniorch kernel's arguments (`Launcher`).

    The packed call reads each argument through a pointer, so the arguments live in slots made
    once per launcher: one 8-byte cell per integer or pointer (an i32 argument reads the low half,
    which holds its two's complement on little-endian machines), a ctypes float per float. A
    launch only writes the slots and calls; per thread, the same slots with its own program range."""

    def __init__(self, kernel, llvm_text: str, entry: str, abi: list[str], serial: bool = False):
        """`serial`: run the programs one after another on one thread (kernels with atomics)."""
        self.kernel, self.entry, self.abi, self.serial = kernel, entry, list(abi), serial
        self.runs_as = entry  # another kernel's where the backend shared that one's compile (the same code)
        self.engine, self.fn = engine(llvm_text, entry)
        for ty in self.abi:
            if not (ty.startswith("memref<") or ty in _INTS or ty in _FLOATS):
                raise BackendError(f"kernel {entry}: argument type {ty} is not supported on cpu")
        # slot layout: 2 x 5 for Ascend's two unused buffers (null memrefs, stride 1), then per
        # argument 5 (memref: pointer twice, offset 0, size, stride 1) or 1, then gx, gy, gz
        self.n_cells = 10 + sum(5 if ty.startswith("memref<") else 1 for ty in self.abi) + 3
        self.cells = (ctypes.c_int64 * self.n_cells)()
        self.cells[4] = self.cells[9] = 1
        self.floats = {}
        self._packed: dict[int, list] = {}
        self.lock = threading.Lock()

    def _pointers(self, n: int) -> list:
        """n packed argument arrays: the shared slots, then each thread's own lo/hi cells."""
        if n not in self._packed:
            base = ctypes.addressof(self.cells)
            addresses = [base + 8 * i for i in range(self.n_cells)]
            for i, slot in self.floats.items():
                addresses[i] = ctypes.addressof(slot)
            arrays = []
            for _ in range(n):
                bounds = (ctypes.c_int64 * 2)()
                packed = (ctypes.c_void_p * (self.n_cells + 2))(*addresses, ctypes.addressof(bounds),
                                                                 ctypes.addressof(bounds) + 8)
                arrays.append((packed, bounds))
            self._packed[n] = arrays
        return self._packed[n]

    def _fill(self, raw: list) -> int:
        """Writes the arguments into the slots; returns the bytes the tensors hold (for threading)."""
        if len(raw) != len(self.abi):
            raise BackendError(f"kernel {self.entry}: {len(raw)} arguments for the {len(self.abi)} "
                               f"its Ascend linalg takes ({', '.join(self.abi)})")
        cells, i, moved = self.cells, 10, 0
        for v, ty in zip(raw, self.abi):
            if ty[0] == "m":  # memref<...>
                if not isinstance(v, torch.Tensor) or v.device.type != "cpu":
                    raise BackendError(f"kernel {self.entry}: a CPU tensor is needed where it takes {ty}, got {v!r}")
                ptr, numel = v.data_ptr(), v.numel()
                cells[i] = cells[i + 1] = ptr
                # the elements the view spans, not its count: a view with gaps (k of a fused k/v
                # projection) reaches further, and the lowering clamps loads into this size
                cells[i + 3], cells[i + 4] = _span(v), 1
                moved += numel * v.element_size()
                i += 5
            else:
                if isinstance(v, torch.Tensor):
                    v = v.item()
                if ty in _FLOATS:
                    slot = self.floats.get(i)
                    if slot is None:
                        slot = self.floats[i] = _FLOATS[ty]()
                        self._packed.clear()
                    slot.value = v
                else:
                    cells[i] = int(v)
                i += 1
        return moved

    def __call__(self, inputs: list, outputs: list, sizes: list | None = None) -> None:
        ks = self.kernel
        grid = ks.launch_grid(ks.size_args(inputs, outputs, sizes)) if ks.symbols else ks.grid
        gx, gy, gz = (int(g) for g in (list(grid) + [1, 1])[:3])
        total = gx * gy * gz
        if total <= 0:
            return
        with self.lock:
            moved = self._fill(tensor_args(ks, inputs, outputs, sizes))
            cells = self.cells
            cells[self.n_cells - 3], cells[self.n_cells - 2], cells[self.n_cells - 1] = gx, gy, gz
            n = min(threads(), total) if moved >= PARALLEL_BYTES and not self.serial else 1
            calls = self._pointers(n)
            for k, (_, bounds) in enumerate(calls):
                bounds[0], bounds[1] = total * k // n, total * (k + 1) // n
            if n == 1:
                self.fn(calls[0][0])
                return
            futures = [_executor().submit(self.fn, packed) for packed, _ in calls[1:]]
            self.fn(calls[0][0])
            for f in futures:
                f.result()


def _span(t: torch.Tensor) -> int:
    """1 + the largest element offset a tensor view addresses from its first element (0 if empty)."""
    if t.numel() == 0:
        return 0
    return 1 + sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride()))


__all__ = ["CpuLauncher", "engine", "jit", "threads"]
