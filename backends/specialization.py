"""Ahead-of-time kernels specialized as Triton's JIT specializes them, and the check that picks them.

A kernel Triton compiles at its first launch is specialized for that launch's arguments: an
integer equal to 1 is compiled in, an integer divisible by 16 and a 16-byte aligned pointer are
marked `tt.divisibility = 16`, and an integer that fits 32 bits is passed as i32. From those facts
the compiler knows that the innermost stride is 1 and rows start on 16-byte boundaries, and it
emits vector loads (`ld.global.v4`) and 16-byte `cp.async`. A kernel compiled ahead of time for
any argument values (every stride an i64 of unknown value) gets scalar loads and 4-byte copies
instead, so a bundle would run slower than the same model compiled just in time.

So `compile_aot` records the arguments every kernel is launched with, by running the region's
launch plan once on meta tensors of its inputs' shapes (addresses on meta tensors are their byte
offsets, so a slice's alignment is known too), and compiles each kernel twice: specialized for
those arguments, and for any values. At launch the arguments' keys, computed here without
Triton, are compared with the specialized kernel's; any difference (a strided or unaligned input,
another size) launches the generic one. The keys mirror Triton's `native_specialize_impl` with
alignment and value specialization on (tests/test_aot_specialization.py checks that they agree).
"""
from __future__ import annotations

I32 = 2 ** 31


def _ptr_key(address: int) -> str:
    return "*D" if address % 16 == 0 else "*"


def arg_key(a) -> str:
    """The specialization of one runtime argument: a tensor (or anything with `data_ptr`) or an int."""
    if hasattr(a, "data_ptr"):
        return _ptr_key(a.data_ptr())
    a = int(a)
    if a == 1:
        return "1"
    ty = "i32" if -I32 <= a < I32 else ("i64" if -2 ** 63 <= a < 2 ** 63 else "u64")
    return ty + ("D" if a % 16 == 0 else "")


def keys(args: list) -> list[str]:
    return [arg_key(a) for a in args]


def recorded(plan, specs) -> dict[str, list[str]]:
    """kernel name -> the specialization of its arguments in the plan run on meta tensors of the
    region's input shapes and dtypes (contiguous, as the trial launch makes them). Kernels launched
    with differing specializations, or that the run does not reach, are left out."""
    import torch

    from uniorch.runtime.compiler import _launching

    from .sdk import tensor_args

    if not specs:
        return {}
    seen: dict[str, list] = {}
    mixed: set = set()  # launched with two specializations: the generic form only

    def launch(kernel, ins, outs, sizes=None):
        got = keys(tensor_args(kernel.source, ins, outs, sizes))
        if seen.setdefault(kernel.name, got) != got:
            mixed.add(kernel.name)

    inputs = [torch.empty(tuple(shape), dtype=dtype, device="meta") for shape, dtype in specs]
    try:
        with _launching(plan, launch), torch.no_grad():
            plan(inputs)
    except Exception:  # noqa: BLE001 - a step meta tensors cannot run: no specialization, not an error
        return {}
    return {name: k for name, k in seen.items() if name not in mixed}


def specialize(ks, spec: list[str]):
    """`ks` to be compiled for `spec`: the same source and launch, another signature."""
    import dataclasses

    if len(spec) != len(ks.arg_names()):
        raise ValueError(f"kernel {ks.name}: {len(spec)} argument keys for {len(ks.arg_names())} arguments")
    return dataclasses.replace(ks, specialization=list(spec))


def accepts(spec: list[str], args: list) -> bool:
    """Whether a kernel compiled for `spec` may run with `args` (tensors, or their addresses where
    `spec` has a pointer): the arguments have exactly that specialization, as Triton's JIT cache
    requires."""
    if len(spec) != len(args):
        return False
    for a, k in zip(args, spec):
        if k.startswith("*"):
            if _ptr_key(a.data_ptr() if hasattr(a, "data_ptr") else int(a)) != k:
                return False
        elif hasattr(a, "data_ptr") or arg_key(a) != k:
            return False
    return True


__all__ = ["arg_key", "keys", "recorded", "specialize", "accepts"]
