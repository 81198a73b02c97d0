"""Running a kernel lowered by `lowering.py`: JIT-compiled by MLIR's ExecutionEngine (torch-mlir's
bindings), called in this process through its packed interface (`void f(void **args)`), the grid
split over threads.

The ExecutionEngine's packed wrapper takes one pointer per LLVM argument; a memref<?xT> argument
is five of them (allocated pointer, aligned pointer, offset, size, stride), as MLIR's memref
descriptor lays it out. The kernel addresses a tensor only through `memref.reinterpret_cast`
with the strides uniorch passes, so the descriptor is the tensor's first element with offset 0,
its storage size and stride 1. ctypes releases the GIL during the call, so threads run programs
of the grid in parallel.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from ..sdk import BackendError, tensor_args
from .lowering import grid_name

_SCALARS = {"i64": ctypes.c_int64, "i32": ctypes.c_int32, "i16": ctypes.c_int16, "i8": ctypes.c_int8,
            "i1": ctypes.c_bool, "f32": ctypes.c_float, "f64": ctypes.c_double, "index": ctypes.c_int64}
# Threads pay off once a launch moves this many bytes (measured: below it, handing programs to a
# pool costs more than the programs themselves).
PARALLEL_BYTES = 1 << 18

_engines: dict[str, tuple] = {}
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
    """(ExecutionEngine, the grid function's packed entry), compiled once per process per text."""
    key = hashlib.sha256(llvm_text.encode()).hexdigest()
    with _engines_lock:
        hit = _engines.get(key)
        if hit is not None:
            return hit[1], hit[3]
        from torch_mlir import ir
        from torch_mlir.execution_engine import ExecutionEngine

        context = ir.Context()
        with context:
            module = ir.Module.parse(llvm_text)
            try:
                ee = ExecutionEngine(module, opt_level=3)
                ee.initialize()
            except Exception as err:  # noqa: BLE001
                raise BackendError(f"kernel {entry}: MLIR's ExecutionEngine could not compile it: {err}") from None
            address = ee.raw_lookup(grid_name(entry))
        if not address:
            raise BackendError(f"kernel {entry}: no {grid_name(entry)} in the JIT-compiled module")
        fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)
        _engines[key] = (context, ee, module, fn)  # the context and module outlive the engine's code
        return ee, fn


def _memref(t: torch.Tensor) -> list:
    ptr = ctypes.c_void_p(t.data_ptr())
    return [ptr, ctypes.c_void_p(t.data_ptr()), ctypes.c_int64(0),
            ctypes.c_int64(max(1, t.untyped_storage().nbytes() // max(1, t.element_size()))), ctypes.c_int64(1)]


_NULL_I8 = [ctypes.c_void_p(0), ctypes.c_void_p(0), ctypes.c_int64(0), ctypes.c_int64(0), ctypes.c_int64(1)]


class CpuLauncher:
    """Calls one kernel's grid function with a uniorch kernel's arguments (`Launcher`)."""

    def __init__(self, kernel, llvm_text: str, entry: str, abi: list[str], serial: bool = False):
        """`serial`: run the programs one after another on one thread (kernels with atomics)."""
        self.kernel, self.entry, self.abi, self.serial = kernel, entry, list(abi), serial
        self.engine, self.fn = engine(llvm_text, entry)

    def _values(self, inputs, outputs, sizes) -> list:
        raw = tensor_args(self.kernel, inputs, outputs, sizes)
        if len(raw) != len(self.abi):
            raise BackendError(f"kernel {self.entry}: {len(raw)} arguments for the {len(self.abi)} "
                               f"its Ascend linalg takes ({', '.join(self.abi)})")
        values = list(_NULL_I8) + list(_NULL_I8)
        for v, ty in zip(raw, self.abi):
            if ty.startswith("memref<"):
                if not isinstance(v, torch.Tensor) or v.device.type != "cpu":
                    raise BackendError(f"kernel {self.entry}: a CPU tensor is needed where it takes {ty}, got {v!r}")
                values += _memref(v)
            elif ty in _SCALARS:
                values.append(_SCALARS[ty](v.item() if isinstance(v, torch.Tensor) else v))
            else:
                raise BackendError(f"kernel {self.entry}: argument type {ty} is not supported on cpu")
        return values

    def __call__(self, inputs: list, outputs: list, sizes: list | None = None) -> None:
        ks = self.kernel
        grid = ks.launch_grid(ks.size_args(inputs, outputs, sizes)) if ks.symbols else ks.grid
        gx, gy, gz = (int(g) for g in (list(grid) + [1, 1])[:3])
        total = gx * gy * gz
        if total <= 0:
            return
        values = self._values(inputs, outputs, sizes)
        values += [ctypes.c_int32(gx), ctypes.c_int32(gy), ctypes.c_int32(gz)]
        moved = sum(t.numel() * t.element_size() for t in list(inputs) + list(outputs) if isinstance(t, torch.Tensor))
        n = min(threads(), total) if moved >= PARALLEL_BYTES and not self.serial else 1
        bounds = [(total * i // n, total * (i + 1) // n) for i in range(n)]
        calls = []
        for lo, hi in bounds:
            cells = values + [ctypes.c_int64(lo), ctypes.c_int64(hi)]
            packed = (ctypes.c_void_p * len(cells))(*[ctypes.addressof(c) for c in cells])
            calls.append((packed, cells))
        if n == 1:
            self.fn(calls[0][0])
            return
        futures = [_executor().submit(self.fn, packed) for packed, _ in calls[1:]]
        self.fn(calls[0][0])
        for f in futures:
            f.result()


__all__ = ["CpuLauncher", "engine", "threads"]
