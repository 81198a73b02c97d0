"""The cpu target's JIT-compiled kernels kept on disk, as shared libraries, for later processes.

MLIR's ExecutionEngine compiles a kernel's LLVM dialect in the process that runs it, and nothing of
that survives the process: Triton's stages come from the driver's disk cache on a second run, the
LLVM compile came again, about half of a warm training step's compile (RegNetY-400MF: 27 of 55 s,
ResNet-18: 9 of 25 s, 0.05 to 0.3 s a kernel). Here the engine also dumps its object file, which
the host's C compiler links into a shared library in the background; a later process with the same
LLVM text loads that library instead of compiling.

The key is the LLVM text, torch-mlir's version and the host CPU: the engine compiles for the CPU it
runs on (its vector extensions), so a library made on one machine would fault on an older one that
shares the cache folder. Without a C compiler, or where a library does not load, kernels are
compiled by the engine as before: the cache only saves time.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

from uniorch import config

_linker: ThreadPoolExecutor | None = None
_linker_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def _host() -> str:
    """The torch-mlir build and the host CPU's identity and features."""
    try:
        from importlib.metadata import version

        mlir = version("torch-mlir")
    except Exception:  # noqa: BLE001 - an unpackaged build: its location stands in for the version
        import torch_mlir

        mlir = os.path.dirname(torch_mlir.__file__)
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = "".join(sorted({line for line in f if line.startswith(("model name", "flags", "vendor_id"))}))
    except OSError:
        pass
    return f"{mlir}|{platform.machine()}|{cpu}"


@functools.lru_cache(maxsize=1)
def _compiler() -> str | None:
    return os.environ.get("CC") and shutil.which(os.environ["CC"]) or shutil.which("cc") or shutil.which("gcc")


def folder() -> str:
    return os.path.join(config.cache_dir(), "cpu-kernels")


def key(llvm_text: str) -> str:
    return hashlib.sha256(f"{_host()}\n{llvm_text}".encode()).hexdigest()[:40]


def _path(k: str) -> str:
    return os.path.join(folder(), k + ".so")


def has(k: str) -> bool:
    return os.path.exists(_path(k))


def load(k: str, symbol: str):
    """(library, function address) of a kernel linked by an earlier process, or None."""
    path = _path(k)
    if not os.path.exists(path):
        return None
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
        address = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value
    except (OSError, AttributeError):  # a damaged library: the engine compiles the kernel again,
        try:                            # and links it anew
            os.remove(path)
        except OSError:
            pass
        return None
    return (lib, address) if address else None


def store(engine, k: str, background: bool = True) -> None:
    """Dumps the engine's object file (made with enable_object_dump) and links it into the cache,
    in a background thread unless `background` is False; best effort."""
    cc = _compiler()
    if cc is None or has(k):
        return
    try:
        os.makedirs(folder(), exist_ok=True)
        fd, obj = tempfile.mkstemp(suffix=".o", dir=folder())
        os.close(fd)
        engine.dump_to_object_file(obj)
    except Exception:  # noqa: BLE001 - an unwritable cache folder: nothing kept
        return
    if not background:
        _link(cc, obj, _path(k))
        return
    global _linker
    with _linker_lock:
        if _linker is None:
            _linker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="uniorch-cpu-link")
    _linker.submit(_link, cc, obj, _path(k))


def _link(cc: str, obj: str, path: str) -> None:
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        # the engine's code is not position independent: the library carries text relocations,
        # which the loader applies (-z notext says they are meant)
        done = subprocess.run([cc, "-shared", "-Wl,-z,notext", "-o", tmp, obj], capture_output=True, timeout=120)
        if done.returncode == 0:
            os.replace(tmp, path)  # whole or absent: a reader never sees half a library
    except (OSError, subprocess.SubprocessError):
        pass
    finally:
        for p in (obj, tmp):
            try:
                os.remove(p)
            except OSError:
                pass


def _forget_linker() -> None:
    global _linker
    _linker = None  # a forked child has the pool but not its thread


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_linker)


def wait() -> None:
    """Returns once every queued library is linked (tests)."""
    global _linker
    with _linker_lock:
        pool, _linker = _linker, None
    if pool is not None:
        pool.shutdown(wait=True)


__all__ = ["folder", "has", "key", "load", "store", "wait"]
