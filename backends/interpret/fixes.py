"""Repairs to Triton's CPU interpreter, applied once before the first interpreted kernel runs.

The generated source is valid Triton (it compiles for GPUs unchanged); these are bugs of the
interpreter's numpy emulation, each with the symptom it caused:

- comparisons (`create_icmp*`, `create_fcmp*`) return numpy bool data labelled with the *operand's*
  type (e.g. int64) instead of int1. Harmless while the value stays a block, but splatting a
  0-d comparison to a block (`row_mask & (scalar >= 0)`) converts it by the label: the mask
  becomes an int array ("ValueError: mask has unsupported dtype" in `tl.load`), or an `|` with a
  float-labelled one fails ("ufunc 'bitwise_or' not supported for the input types"). Fixed by
  labelling comparison results int1, as the compiled IR types them.
"""
from __future__ import annotations

_applied = False


def apply() -> None:
    global _applied
    if _applied:
        return
    _applied = True
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
