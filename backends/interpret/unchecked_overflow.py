"""Triton's interpreter without the integer-overflow checks it computes and then throws away.

With `sanitize_overflow` on (the interpreter's default), every integer add, sub and mul is done a
second time in int64 and compared with the type's bounds, and the result goes to `device_assert`,
which does nothing unless `debug` is on (triton/language/semantic.py), as for compiled kernels. So
at the interpreter's default settings the check changes no result; it cost half the interpreted
time of a loop of matrix products (101 of 198 profiled seconds of tests/test_matrix_functions.py),
where every step's index arithmetic is integer.

It is turned off only while `debug` is off, so an interpreter run with debugging keeps its checks.
"""
from __future__ import annotations

import dataclasses
import functools


@functools.cache  # once per process: it patches Triton's classes
def apply() -> None:
    from triton.runtime import interpreter

    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if options is None or not dataclasses.is_dataclass(options):
        return
    if getattr(options, "sanitize_overflow", False) and not getattr(options, "debug", True):
        builder.options = dataclasses.replace(options, sanitize_overflow=False)
