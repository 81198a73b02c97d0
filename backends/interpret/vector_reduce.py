"""Reductions and scans with a user combine function, run a vector at a time by Triton's interpreter.

Triton's interpreter reduces with numpy only for its own combines (`tl.sum`, `tl.max`, argmax);
any other `tl.reduce(x, axis, combine)` or `tl.associative_scan` calls the combine function once
per element, in Python (`ReduceOps.generic_reduce`, `ScanOps.generic_scan`). uniorch's kernels
reduce with their own combines (a NaN-propagating max, as torch's; Welford's triple; segmented
scans), so at the suite's sizes that per-element loop was most of the interpreter's time: 160 of
220 profiled seconds of tests/test_attention.py.

Both are replaced here by the same combine called on whole slices (a combine function is
elementwise over its operands, which is what lets a GPU apply it across lanes):

- a reduction is a tree: neighbours (2i, 2i+1) combined, level by level, the lower-indexed side
  always the left operand, as Triton's GPU lowering combines within and then across threads. A
  combine is associative by `tl.reduce`'s contract, so only float rounding can differ from the
  interpreter's left fold, as it does between that fold and a GPU.
- a scan is Hillis and Steele's: at distance d = 1, 2, 4, ... each element is combined with the
  one d before it (left operand the earlier one); log2(n) combines.

Where a combine cannot take blocks (Python control flow on a value, a scalar-only builtin), the
interpreter's own loop runs instead, so the result is never a guess.
"""
from __future__ import annotations

import functools


@functools.cache  # once per process: it patches Triton's classes
def apply() -> None:
    from triton.runtime.interpreter import ReduceOps, ScanOps

    element_reduce, element_scan = ReduceOps.generic_reduce, ScanOps.generic_scan

    def generic_reduce(self, input):
        try:
            return _tree_reduce(self, input)
        except Exception:  # noqa: BLE001 - a combine that needs scalars: the interpreter's own loop
            return element_reduce(self, input)

    def generic_scan(self, input):
        try:
            return _doubling_scan(self, input)
        except Exception:  # noqa: BLE001
            return element_scan(self, input)

    ReduceOps.generic_reduce = generic_reduce
    ScanOps.generic_scan = generic_scan


def _combine(op, lefts, rights, dtypes):
    """The combine function on blocks; its results as arrays of the operands' shape and types
    (the interpreter's loop stores each result into an array of the input's dtype too).

    Operands go in flattened, padded to a power of two (a block's shape must be one) with copies
    of their own elements, so the padding lanes compute on real values and are dropped after."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import _get_np_dtype

    shape = lefts[0].shape
    size = int(np.prod(shape, dtype=np.int64))
    lanes = 1 << max(size - 1, 0).bit_length()
    flat = [op.to_tensor(np.resize(x, lanes), t) for x, t in zip(lefts + rights, dtypes + dtypes)]
    # the interpreter calls any block true; a combine deciding on a value must get scalars
    truth = tl.core.tensor.__bool__
    tl.core.tensor.__bool__ = _scalar_truth
    try:
        out = op.combine_fn.fn(*flat)
    finally:
        tl.core.tensor.__bool__ = truth
    out = out if isinstance(out, tuple) else (out,)
    if len(out) != len(dtypes):
        raise ValueError("combine returned another number of values")
    arrays = []
    for value, t in zip(out, dtypes):
        if isinstance(value, tl.constexpr):
            value = value.value
        data = np.asarray(value.handle.data if isinstance(value, tl.core.tensor) else value)
        if data.shape != (lanes,):
            if data.size != 1:
                raise ValueError("combine changed the shape")
            data = np.broadcast_to(data.reshape(()), (lanes,))
        arrays.append(data[:size].reshape(shape).astype(_get_np_dtype(t)))
    return arrays


def _scalar_truth(self):
    data = self.handle.data
    if data.size != 1:
        raise ValueError("a combine branches on a value: it runs an element at a time")
    return bool(data)


def _tree_reduce(op, input):
    import numpy as np

    original_axis = op.axis
    ndim = len(input[0].handle.data.shape)
    input, axis = op.unravel(input, op.axis)
    dtypes = [x.dtype for x in input]
    values = [np.moveaxis(np.asarray(x.handle.data), axis, -1) for x in input]
    while values[0].shape[-1] > 1:
        n = values[0].shape[-1]
        pairs = 2 * (n // 2)
        merged = _combine(op, [v[..., 0:pairs:2] for v in values], [v[..., 1:pairs:2] for v in values], dtypes)
        if n % 2:  # the last one waits for the next level, still after everything to its left
            merged = [np.concatenate([m, v[..., n - 1:]], axis=-1) for m, v in zip(merged, values)]
        values = merged
    ret = []
    for v, t in zip(values, dtypes):
        data = v[..., 0]
        if op.keep_dims:
            data = np.expand_dims(data, axis) if original_axis is not None else data.reshape((1,) * ndim)
        elif original_axis is None:
            data = data.item()
        ret.append(op.to_tensor(data, t))
    return ret


def _doubling_scan(op, input):
    import numpy as np

    axis = op.axis
    dtypes = [x.dtype for x in input]
    values = [np.array(np.moveaxis(np.asarray(x.handle.data), axis, -1)) for x in input]
    n, d = values[0].shape[-1], 1
    while d < n:
        merged = _combine(op, [v[..., :n - d] for v in values], [v[..., d:] for v in values], dtypes)
        for v, m in zip(values, merged):
            v[..., d:] = m
        d *= 2
    return [op.to_tensor(np.ascontiguousarray(np.moveaxis(v, -1, axis)), t) for v, t in zip(values, dtypes)]
