"""Repairs to Triton's CPU interpreter, applied once before the first interpreted kernel runs.

The generated source is valid Triton (it compiles for GPUs unchanged); these are bugs of the
interpreter's numpy emulation, each with the symptom it caused:

- comparisons (`create_icmp*`, `create_fcmp*`) return numpy bool data labelled with the *operand's*
  type (e.g. int64) instead of int1. Harmless while the value stays a block, but splatting a
  0-d comparison to a block (`row_mask & (scalar >= 0)`) converts it by the label: the mask
  becomes an int array ("ValueError: mask has unsupported dtype" in `tl.load`), or an `|` with a
  float-labelled one fails ("ufunc 'bitwise_or' not supported for the input types"). Fixed by
  labelling comparison results int1, as the compiled IR types them.
- casts to and from bfloat16 (stored as uint16 bits): only bf16 <-> fp32 converted bits, and by
  truncation; every other pair (f64, f16, integers <-> bf16) reinterpreted the number as bits,
  so `int64 -> bf16` of 4 gave ~0 (nanmean divided by it: -inf) and `f64 -> bf16` constants were
  garbage (ndtr). Fixed by going through fp32 and rounding to nearest even, as GPUs convert.
- bf16 constants: Triton 3.6's builder has no `get_bf16`, which Triton's front end calls for every
  non-zero bf16 scalar (`tl.full(..., tl.bfloat16)`, a literal meeting a bf16 operand), so every such
  kernel raised AttributeError at its trial launch and ran eagerly. Added where it is missing, as
  later Triton defines it: the value rounded to fp32, then to bf16 bits to nearest even.

Each repair is chosen by what the installed interpreter has, not by its version number, so the
same code serves every Triton uniorch supports.
"""
from __future__ import annotations

import functools


@functools.cache  # once per process: it patches Triton's classes
def apply() -> None:
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import InterpreterBuilder, TensorHandle

    def as_i1(orig):
        def cmp(self, lhs, rhs):
            out = orig(self, lhs, rhs)
            return TensorHandle(np.asarray(out.data).astype(np.bool_), tl.int1)

        return cmp

    for name in dir(InterpreterBuilder):
        if name.startswith(("create_icmp", "create_fcmp")):
            setattr(InterpreterBuilder, name, as_i1(getattr(InterpreterBuilder, name)))

    original_cast = InterpreterBuilder.cast_impl

    def cast_impl(self, src, dst_type):
        s, d = src.dtype.scalar, dst_type.scalar
        if d == tl.bfloat16 and s != tl.bfloat16:
            f32 = np.asarray(src.data).astype(np.float32)
            return TensorHandle(_f32_to_bf16_bits(f32), tl.bfloat16)
        if s == tl.bfloat16 and d != tl.bfloat16:
            f32 = (np.asarray(src.data).astype(np.uint32) << 16).view(np.float32)
            return TensorHandle(f32.astype(_np_type(d)), d)
        return original_cast(self, src, dst_type)

    InterpreterBuilder.cast_impl = cast_impl
    for name in ("create_si_to_fp", "create_ui_to_fp", "create_fp_to_si", "create_fp_to_ui", "create_fp_ext",
                 "create_fp_trunc"):
        setattr(InterpreterBuilder, name, lambda self, src, dst_type: self.cast_impl(src, dst_type))
    original_fp_to_fp = InterpreterBuilder.create_fp_to_fp

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if tl.bfloat16 in (src.dtype.scalar, dst_type.scalar):
            return self.cast_impl(src, dst_type)
        return original_fp_to_fp(self, src, dst_type, rounding_mode)

    InterpreterBuilder.create_fp_to_fp = create_fp_to_fp

    if not hasattr(InterpreterBuilder, "get_bf16"):
        def get_bf16(self, value):
            return TensorHandle(_f32_to_bf16_bits(np.array([value], dtype=np.float32)), tl.bfloat16)

        InterpreterBuilder.get_bf16 = get_bf16


def _np_type(ty):
    from triton.runtime.interpreter import _get_np_dtype

    return _get_np_dtype(ty)


def _f32_to_bf16_bits(x):
    """fp32 -> bf16 bit patterns, round to nearest even; NaN stays a (quiet) NaN."""
    import numpy as np

    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if np.any(nan):
        rounded = np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)
    return rounded
