"""Turns generated Triton source into a launchable function, for the interpreter or a GPU.

Generated modules use the names `jit` and `libdevice` without importing them; we bind them before
executing the module: Triton's interpreter (`InterpretedFunction`) and the CPU bridge of
backends/interpret/libdevice.py for the `interpret` target, `triton.jit` and
`triton.language.extra.libdevice` otherwise.
Triton reads kernel source back from the file (inspect.getsource), so each module is written to
the kernel cache directory under a name derived from its content.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
from typing import Any

from uniorch.codegen.source import KernelSource


def cache_dir() -> str:
    from uniorch import config

    root = config.cache_dir()
    path = os.path.join(root, "kernels")
    os.makedirs(path, exist_ok=True)
    return path


def load(ks: KernelSource, interpret: bool, shared: bool = True) -> Any:
    """The kernel's function object: an InterpretedFunction or a triton JITFunction.

    Kernels that are the same code but for their names and comments (`KernelSource.body_digest`:
    the same layer repeated, in one model or in blocks compiled apart) get the function loaded
    first, so Triton compiles it once per specialization, as Inductor defines one kernel for
    identical source. Its name is the first kernel's: what a profiler shows for all of them.
    `shared=False`: the kernel's own function (a backend's stages that name files by kernel)."""
    if not shared:
        return _load(ks, interpret)
    key = (ks.body_digest(), interpret)
    with _LOADING:
        fn = _SHARED.get(key)
    if fn is not None:
        return fn
    fn = _load(ks, interpret)
    with _LOADING:
        return _SHARED.setdefault(key, fn)


def forget_shared() -> None:
    """Kernels loaded so far are not handed to later kernels of the same code: a cold compile,
    as the benchmark measures one, compiles them again."""
    with _LOADING:
        _SHARED.clear()


def _load(ks: KernelSource, interpret: bool) -> Any:
    digest = hashlib.sha256(ks.source.encode()).hexdigest()[:16]
    path = os.path.join(cache_dir(), f"{ks.fn_name}_{digest}.py")
    if not _holds(path, ks.source):  # absent, or a corrupt/stale entry: never run it, rewrite it
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".py")
        with os.fdopen(fd, "w") as f:
            f.write(ks.source)
        os.replace(tmp, path)  # atomic: concurrent compiles never see a half-written file
    mod_name = f"uniorch_kernel_{ks.fn_name}_{digest}_{'i' if interpret else 'c'}"
    # one thread at a time: a module is in sys.modules before its code has run, so another thread
    # (compile_aot's stages run in threads) could take it half-made (a kernel's generic and
    # specialized compiles load the same source: "module ... has no attribute 'k0_attention'")
    with _LOADING:
        mod = sys.modules.get(mod_name)
        if mod is None:
            spec = importlib.util.spec_from_file_location(mod_name, path)
            mod = importlib.util.module_from_spec(spec)
            mod.jit = _interpreted if interpret else _compiled
            mod.libdevice = _libdevice(interpret)
            sys.modules[mod_name] = mod
            try:
                spec.loader.exec_module(mod)
            except BaseException:
                sys.modules.pop(mod_name, None)
                raise
    return getattr(mod, ks.fn_name)


_LOADING = threading.Lock()
_SHARED: dict = {}  # (body digest, interpreted) -> the function loaded first for it


def _holds(path: str, source: str) -> bool:
    try:
        with open(path) as f:
            return f.read() == source
    except (OSError, UnicodeDecodeError):
        return False


def _libdevice(interpret: bool):
    """The vendor math library kernels call as `libdevice.<fn>` (codegen/special.py): Triton's
    module, which each GPU backend resolves to its own library at JIT time, or for the interpreter
    (which cannot run extern calls) the bridge evaluating the same functions on the CPU."""
    if interpret:
        from uniorch.backends.interpret import libdevice
    else:
        from triton.language.extra import libdevice
    return libdevice


def _interpreted(fn):
    from triton.runtime.interpreter import InterpretedFunction

    from uniorch.backends.interpret import prepare_interpreter

    prepare_interpreter()  # repairs and fast paths of Triton's interpreter (backends/interpret/)
    return InterpretedFunction(fn)


def _compiled(fn):
    import triton

    return triton.jit(fn)


def launch(ks: KernelSource, fn: Any, inputs: list, outputs: list) -> None:
    """Calls the kernel on torch tensors: pointers and element strides, in the KernelSource order."""
    from uniorch.backends.sdk import tensor_args

    grid = ks.launch_grid(ks.size_args(inputs, outputs)) if ks.symbols else ks.grid  # sizes read off the tensors
    fn[grid](*tensor_args(ks, inputs, outputs), **ks.constexprs, num_warps=ks.num_warps, num_stages=ks.num_stages)
