"""Launching a uniorch kernel through Triton's JIT (kernels compiled ahead of time launch through
the vendor driver instead: `binary_launch`).

The first launch of each argument specialization goes through `JITFunction.run`, which binds the
arguments, specializes them, looks the compiled kernel up (compiling it the first time) and
launches it. Later launches with the same specialization call the compiled kernel's launcher
directly, as Inductor's generated code does. H200 run 3 measured what that saves: 98 us of host
time per call of a one-kernel LayerNorm whose kernel takes 69 us (eager: 19 us), and 504 us for a
9-kernel BERT layer, about half of it in `JITFunction.run`.

The key of the direct path is Triton's own specialization of every argument (its
`native_specialize_impl`: a pointer's 16-byte alignment, an integer equal to 1, divisible by 16
or past 32 bits), with the current device, so a launch reuses exactly the kernel Triton would
have picked. Launch hooks (a profiler's `launch_enter_hook`) take Triton's own path, which calls
them.

A static plan goes one step further (`bind`, runtime/bound_launch.py): for one layout of its
inputs, each launch is a function made for it, the launcher called with the grid, the strides and
the constexprs written into its code.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from .sdk import tensor_args


# Triton's interpreter runs a kernel by patching `triton.language` process-wide and restoring it
# afterwards; two threads interleaving that leave it patched for good, and Triton's front end then
# builds IR with the interpreter's builder ("'InterpreterBuilder' object has no attribute
# 'create_reduce'"). Interpreted launches and front-end compiles therefore take turns.
TRITON_LANGUAGE_LOCK = threading.RLock()


class TritonLauncher:
    """Calls a `@triton.jit` (or interpreted) kernel with a uniorch kernel's arguments."""

    def __init__(self, kernel, fn: Any):
        self.kernel, self.fn = kernel, fn
        # another kernel's name where the loader shared that kernel's function (the same code)
        self.runs_as = getattr(getattr(fn, "fn", fn), "__name__", None) or kernel.fn_name
        self._direct: dict = {}  # specialization key -> the compiled kernel's launch
        self._compiled: dict = {}  # specialization key -> its _Direct (what `bind` writes calls to)
        self._tail = constexpr_tail(fn, kernel)
        self._specialize = _specializer(fn) if self._tail is not None and _direct_wanted() else None

    def __call__(self, inputs: list, outputs: list, sizes: list | None = None) -> None:
        """`sizes`: the values of the kernel's size symbols, when it has any (else read off the tensors)."""
        ks = self.kernel
        grid = ks.launch_grid(ks.size_args(inputs, outputs, sizes)) if ks.symbols else ks.grid
        args = tensor_args(ks, inputs, outputs, sizes)
        key = None
        if self._specialize is not None:
            key = self._specialize(args)
            launch = self._direct.get(key)
            if launch is not None and launch(grid, args):
                return
            if key in self._direct:  # the direct launch was refused: Triton's path from then on
                key = None
        with TRITON_LANGUAGE_LOCK:
            compiled = self.fn[grid](*args, **ks.constexprs, num_warps=ks.num_warps, num_stages=ks.num_stages)
        if key is not None and compiled is not None:
            self._compiled[key] = direct = _direct_launch(compiled, self._tail)
            self._direct[key] = _checked(direct, self._direct, key)

    def bind(self, inputs: list, outputs: list) -> Optional[Callable]:
        """`(stream, *inputs, *outputs) -> None`: this launch for tensors with these tensors'
        strides, alignment and dtypes, made once (runtime/bound_launch.py), with the grid, the
        strides and the constexprs written into its code: Triton's launcher called with no
        argument list built, no specialization key and no stream lookup per launch. None where
        the direct path is not in use for these arguments (the interpreter, size symbols, a
        launch that went Triton's way)."""
        ks = self.kernel
        if self._specialize is None or ks.symbols:
            return None
        args = tensor_args(ks, inputs, outputs)
        key = self._specialize(args)
        direct = self._compiled.get(key)
        if direct is None or self._direct.get(key) is None or not direct.checked:
            return None
        return _bound(direct, _grid3(ks.grid), list(inputs) + list(outputs))


    def warmup(self, inputs: list, outputs: list, sizes: list | None = None) -> None:
        """Compiles the kernel for these arguments without launching it: under Triton's
        AsyncCompileMode (runtime/compiler.py `_compile_ahead`), the compile is queued on its
        executor and this returns at once."""
        if not hasattr(self.fn, "warmup") or not hasattr(self.fn, "device_caches"):
            return  # the interpreter compiles nothing ahead
        ks = self.kernel
        grid = ks.launch_grid(ks.size_args(inputs, outputs, sizes)) if ks.symbols else ks.grid
        args = tensor_args(ks, inputs, outputs, sizes)
        with TRITON_LANGUAGE_LOCK:
            self.fn.warmup(*args, grid=grid, **ks.constexprs, num_warps=ks.num_warps, num_stages=ks.num_stages)


def _direct_wanted() -> bool:
    import os

    from uniorch import config

    assert "UNIORCH_TRITON_LAUNCH" in config.KNOBS
    return os.environ.get("UNIORCH_TRITON_LAUNCH", "").strip().lower() != "jit"


def _checked(launch: Callable, table: dict, key) -> Callable:
    """`launch` returning True; on its first call, if the launcher refuses the argument list (a
    Triton that calls it differently: a TypeError, raised before anything runs), False, and the key
    goes to Triton's own path for good."""

    def first(grid, args) -> bool:
        try:
            launch(grid, args)
        except TypeError:
            table[key] = None
            return False
        table[key] = lambda g, a: launch(g, a) or True
        if isinstance(launch, _Direct):
            launch.checked = True
        return True

    return first


def constexpr_tail(fn, kernel) -> Optional[tuple]:
    """The values of `kernel`'s constexpr parameters in the order of `fn`'s signature, where they
    come after every runtime argument (as uniorch generates them): what follows the runtime
    arguments in the launcher's argument list. None where that does not hold."""
    names = list(getattr(fn, "arg_names", None) or ())
    n = len(kernel.constexprs)
    if not names or n > len(names) or set(names[len(names) - n:]) != set(kernel.constexprs):
        return None
    return tuple(kernel.constexprs[name] for name in names[len(names) - n:])


def _specializer(fn) -> Optional[Callable]:
    """(args) -> the key of Triton's specialization on the current device, for a JITFunction on a
    GPU; None for the interpreter, or where this Triton lacks what the direct path needs."""
    if not hasattr(fn, "device_caches") or not hasattr(fn, "arg_names"):
        return None  # the interpreter's function: nothing to skip
    try:
        from triton._C.libtriton import native_specialize_impl
        from triton.runtime.driver import driver
    except ImportError:
        return None
    try:
        backend = _backend_class(driver.active)
        current = driver.active.get_current_device
    except Exception:  # noqa: BLE001 - no GPU driver active: Triton's own path raises its error
        return None
    if backend is None:
        return None

    return specialization_key(lambda a: native_specialize_impl(backend, a, False, True, True), current)


def specialization_key(native: Callable, current: Callable) -> Callable:
    """(args) -> a key that is equal for two argument lists only where Triton specializes them
    alike: an int stands for itself (Triton's key of an int is a function of its value), a tensor
    for its dtype and whether its address is 16-byte aligned (what Triton's key of a pointer
    says), anything else for Triton's own key. Triton's `native_specialize_impl` of a tensor
    cost 1.9 us on this CPU, this key's 0.4, and a kernel passes 2-6 tensors."""
    import torch  # here, not at import: uniorch-opt on MLIR text loads this module without torch

    def key(args: list) -> tuple:
        return (current(),) + tuple([a if type(a) is int else
                                     (a.dtype, not a.data_ptr() & 15) if isinstance(a, torch.Tensor) else native(a)
                                     for a in args])

    return key


def _backend_class(active) -> Optional[type]:
    """The compiler backend class whose specialization Triton's binder uses for this driver."""
    from triton.compiler.compiler import make_backend

    try:
        return type(make_backend(active.get_current_target()))
    except Exception:  # noqa: BLE001
        return None


def _direct_launch(compiled, tail: tuple) -> "_Direct":
    """(grid, args) -> None: `compiled`'s launcher, called as `JITFunction.run` calls it."""
    compiled._init_handles()
    return _Direct(compiled, tail)


class _Direct:
    """A compiled kernel's launcher with what each call passes it besides the arguments."""

    def __init__(self, compiled, tail: tuple):
        from triton import knobs
        from triton.runtime.driver import driver

        self.compiled, self.tail = compiled, tail
        self.run, self.function, self.packed = compiled.run, compiled.function, compiled.packed_metadata
        self.active, self.runtime = driver.active, knobs.runtime
        self.checked = False  # set once a launch took these arguments (`_checked`)

    def __call__(self, grid, args) -> None:
        g = _grid3(grid)
        stream = self.stream()
        if stream is None:
            self.compiled[g](*args, *self.tail)  # the hooks want their metadata: Triton's own path
            return
        self.run(g[0], g[1], g[2], stream, self.function, self.packed, None, None, None, *args, *self.tail)

    def stream(self, device=None):
        """The current stream's handle; None while a launch hook is set (launches then take
        Triton's own path, which calls the hooks) or when the current device is not `device`
        (the one the kernel was bound on: its module is loaded there)."""
        runtime = self.runtime
        if _hooked(runtime.launch_enter_hook) or _hooked(runtime.launch_exit_hook):
            return None
        active = self.active
        current = active.get_current_device()
        if device is not None and current != device:
            return None
        return active.get_current_stream(current)


def _bound(direct: _Direct, grid: tuple, tensors: list) -> Callable:
    """`(stream, *tensors)` -> the launch of `direct` with `tensors`' strides as constants: Python
    source made for this launch, as Inductor's generated wrapper calls its launchers. `stream`
    is the bound function's attribute, for the plan's one lookup per call."""
    names = [f"t{i}" for i in range(len(tensors))]
    parts = []
    for name, t in zip(names, tensors):
        parts.append(name)
        parts.extend(str(int(s)) for s in t.stride())
    parts.extend(f"c{j}" for j in range(len(direct.tail)))
    src = (f"def launch(stream, {', '.join(names)}):\n"
           f"    run({grid[0]}, {grid[1]}, {grid[2]}, stream, function, packed, None, None, None, "
           f"{', '.join(parts)})\n")
    scope = {"run": direct.run, "function": direct.function, "packed": direct.packed}
    scope.update({f"c{j}": v for j, v in enumerate(direct.tail)})
    exec(compile(src, f"<uniorch bound launch {len(tensors)} tensors>", "exec"), scope)  # noqa: S102 - our own source
    launch = scope["launch"]
    device = direct.active.get_current_device()
    launch.stream = lambda: direct.stream(device)
    return launch


def _hooked(hook) -> bool:
    """Whether a launch hook is set: Triton 3.5 on holds an always-present `HookChain`, empty when
    nothing is registered (H200 run 5's host profile: every launch took Triton's own path, a closure,
    the launch metadata and the stream lookups, because the chains are never None)."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return bool(calls) if calls is not None else True


def _grid3(grid) -> tuple:
    return (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1)


__all__ = ["TritonLauncher", "TRITON_LANGUAGE_LOCK", "constexpr_tail"]
