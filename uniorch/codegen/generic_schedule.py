"""Pointwise/reduction/copy kernels, schedule: block sizes, warps, persistent or looped
reductions per target (or the schedule recorded on the kernel)."""
from __future__ import annotations

from torch_mlir import ir

from uniorch.ir import dims

from . import patterns as pat
from .patterns import recorded_schedule as _sched_from_attr  # noqa: F401 - generic.py's name for it
from .generic_kernel import Kernel, LOOP_BLOCK_R, PERSISTENT_MAX, _cdiv, _next_pow2, _vendor, _warp_size
from .generic_copy import _copy_numel, _mark_inplace


def _warps(elems: int, target: str) -> int:
    w = 8 if elems >= 4096 else 4 if elems >= 512 else 2 if elems >= 128 else 1
    if _warp_size(target) == 64:
        w = max(1, w // 2)
    return w



def choose_schedule(kernel_func, target: str) -> dict:
    """Block sizes, warps and grid for a pointwise / reduction / copy kernel on `target`.

    For a copy kernel writing a slice into a buffer it reads (`tensor.insert_slice` into a kernel
    argument), also records `uniorch.inplace` on the kernel: result 0 is written into that input.
    """
    k = Kernel(kernel_func)
    interp = _vendor(target) == "interpret"
    if k.kind == "copy":
        n = _copy_numel(k)
        _mark_inplace(k)
        block = min(_next_pow2(k.hint(n)), 16384 if interp else 1024)
        return {"block_p": block, "block_r": 1, "block_k": 0, "num_warps": _warps(block, target),
                "num_stages": 1, "looped": False, "grid": [_grid(n, block), 1, 1]}
    budget = 16384 if interp else (4096 if k.elem_bits() <= 32 else 2048)
    if not k.reductive:
        n = k.np_
        block = min(_next_pow2(k.hint(n)), budget if interp else 1024)
        return {"block_p": block, "block_r": 1, "block_k": 0, "num_warps": _warps(block, target),
                "num_stages": 1, "looped": False, "grid": [_grid(n, block), 1, 1]}
    nr, np_ = k.nr, k.hint(k.np_)
    any_tree = any(c is not None for c in k.combiners.values())
    limit = PERSISTENT_MAX if k.elem_bits() <= 32 else PERSISTENT_MAX // 2
    if not any_tree:
        block_r, looped = 1, False
    elif not isinstance(nr, int):  # a symbolic row length: any length, so a loop over it
        block_r, looped = min(LOOP_BLOCK_R, _next_pow2(k.hint(nr))), True
    elif _next_pow2(nr) <= limit:
        block_r, looped = _next_pow2(nr), False
    else:
        block_r, looped = LOOP_BLOCK_R, True
    block_p = max(1, min(_next_pow2(np_), budget // block_r, 1024 if interp else 256))
    return {"block_p": block_p, "block_r": block_r, "block_k": 0,
            "num_warps": _warps(block_p * block_r, target), "num_stages": 1, "looped": looped,
            "grid": [_grid(k.np_, block_p), 1, 1]}


def _grid(n, block: int):
    """Programs for `n` elements: an int, or for a symbolic `n` the expression the launch evaluates."""
    if isinstance(n, int):
        return _cdiv(n, block)
    return dims.text(dims.cdiv(n, block))
