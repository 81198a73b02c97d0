"""A model's cpu kernels compiled ahead, in worker processes, before its first run loads them.

A cold compile on the cpu target ran every kernel's stages (Triton's front end, Ascend's adapter,
the lowering) and MLIR's engine one after another on one core: RegNetY-400MF's training step
took 96 s. None of them parallelises in threads (the engine and the MLIR passes hold the GIL), so
here worker processes run them: each compiles a kernel into the driver's disk cache and links its
code into the shared-library cache (`object_cache.py`), and the model's own serial loading then
finds both. A worker is a fresh interpreter running this module (not multiprocessing's spawn,
which would import the user's script again), started once per process and kept. What a worker
fails on is left for the serial loading, which reports it with the kernel's name as before.
"""
from __future__ import annotations

import atexit
import os
import pickle
import queue
import subprocess
import sys
import threading

from uniorch import config

from . import object_cache

# fewer kernels than this to compile: starting workers would cost more than it saves
MIN_KERNELS = 4
MAX_WORKERS = 8

_lock = threading.Lock()
_procs: list = []


def workers() -> int:
    """How many processes compile ahead: UNIORCH_COMPILE_WORKERS, else the usable CPUs (at most 8)."""
    raw = os.environ.get("UNIORCH_COMPILE_WORKERS", "").strip()
    if raw:
        try:
            return max(0, int(raw))
        except ValueError:
            raise ValueError(f"UNIORCH_COMPILE_WORKERS={raw!r}: a number of processes is expected") from None
    from .launch import threads

    return min(MAX_WORKERS, threads())


def compile_ahead(sources: list, backend) -> int:
    """Compiles the kernels of `sources` that neither disk cache holds, in workers, when there are
    enough of them; returns how many were sent."""
    n = workers()
    if n < 2 or object_cache._compiler() is None:  # without a linker, the code stays in the worker
        return 0
    try:
        return _compile_ahead(sources, backend, n)
    except Exception:  # noqa: BLE001 - only a head start: the serial load compiles and reports
        return 0


def _compile_ahead(sources: list, backend, n: int) -> int:
    from ..driver import cached, sharing_key

    seen, todo = set(), []
    for ks in sources:
        k = sharing_key(ks)
        if k in seen:
            continue
        seen.add(k)
        ck = cached(ks, backend)
        if ck is None or "llmlir" not in ck.asm or not object_cache.has(object_cache.key(ck.asm["llmlir"])):
            todo.append(ks)
    if len(todo) < MIN_KERNELS:
        return 0
    jobs: queue.Queue = queue.Queue()
    for ks in sorted(todo, key=lambda k: -len(k.source)):  # the longest first: less waiting at the end
        jobs.put(ks)
    with _lock:
        procs = _workers(min(n, len(todo)), backend)
        # uniorch's settings go with each kernel (the cache folder, the adapter): the workers
        # outlive changes to them
        settings = {k: v for k, v in os.environ.items() if k.startswith("UNIORCH_")}
        settings["UNIORCH_CACHE_DIR"] = config.cache_dir()
        drivers = [threading.Thread(target=_drive, args=(p, jobs, settings), daemon=True) for p in procs]
        for t in drivers:
            t.start()
        for t in drivers:
            t.join()
    return len(todo)


def _workers(n: int, backend) -> list:
    global _procs
    _procs = [p for p in _procs if p.poll() is None]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    while len(_procs) < n:
        try:
            _procs.append(subprocess.Popen([sys.executable, "-m", __name__, f"{backend.name}:{backend.arch}"],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=subprocess.DEVNULL, env=env))
        except OSError:
            break
    return _procs[:n]


def _drive(proc, jobs: queue.Queue, settings: dict) -> None:
    while True:
        try:
            ks = jobs.get_nowait()
        except queue.Empty:
            return
        try:
            data = pickle.dumps((settings, ks))
            proc.stdin.write(len(data).to_bytes(8, "little") + data)
            proc.stdin.flush()
            head = proc.stdout.read(8)
            if len(head) < 8:
                raise EOFError
            proc.stdout.read(int.from_bytes(head, "little"))  # what failed: the serial load says it again
        except (OSError, EOFError, ValueError):
            proc.kill()  # died (on this kernel, perhaps): the serial load compiles what is left
            return


def _stop() -> None:
    for p in _procs:
        try:
            p.stdin.close()
            p.wait(timeout=5)
        except Exception:  # noqa: BLE001
            p.kill()


def _forget() -> None:
    global _procs
    _procs = []  # a forked child does not own its parent's workers


atexit.register(_stop)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)


def _serve(target: str) -> None:
    """A worker: (uniorch's settings, kernel source) in, as length-prefixed pickles on stdin, each
    kernel compiled with those settings into their cache folder; an empty reply or the error's
    text out."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever the stages print must not reach the replies
    from .. import get_backend
    from ..driver import compile_kernel
    from . import ENTRY_KEY
    from .launch import jit

    backend = get_backend(target)
    inp = sys.stdin.buffer
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        settings, ks = pickle.loads(inp.read(int.from_bytes(head, "little")))
        for k in [k for k in os.environ if k.startswith("UNIORCH_") and k not in settings]:
            del os.environ[k]
        os.environ.update(settings)
        try:
            ck = compile_kernel(ks, backend)
            llvm = ck.asm["llmlir"]
            k = object_cache.key(llvm)
            if not object_cache.has(k):
                _, ee, _, _ = jit(llvm, ck.metadata[ENTRY_KEY])
                object_cache.store(ee, k, background=False)
            reply = b""
        except Exception as err:  # noqa: BLE001
            reply = f"{type(err).__name__}: {err}".encode()
        out.write(len(reply).to_bytes(8, "little") + reply)
        out.flush()


if __name__ == "__main__":
    _serve(sys.argv[1])
