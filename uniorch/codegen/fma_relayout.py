"""Which B factors of an exact float32 dot the launch plan lays out anew before the kernel.

Exact float32 dots run on FMA units, which read the B tile along N; a factor stored with K
innermost (a linear layer's weight, [N, K]; attention's k) is read across it. H200 run 3: x @ w.T
took 4.9 ms where the same sizes as x @ w took 1.5 ms per 68 GFLOP (14 against 46 TFLOP/s);
Inductor calls cuBLAS there. A copy of the factor costs a read and a write of it, a few
microseconds for a weight against milliseconds of dot, so only products of at least 256 rows
(compute-bound) get it; tensor-core dots (16-bit, TF32) read K-major tiles natively. The kernel is
the same; the plan (runtime/plan.py) passes the copy's strides (KernelSource.relayout).
"""
from __future__ import annotations

from .patterns import dot_precision

MIN_ROWS = 256


def fma_relayout(emitter) -> list:
    """[(input, dim order)] for a contraction emitter (codegen/contraction_emit.py `_Emitter`, or
    attention's q·kᵀ part) once its tiles are emitted: each B factor to lay out with its N dim
    innermost, as the order of its dims from outermost to innermost."""
    from .contraction_emit import _vendor

    p = emitter.p
    if emitter.interpret or _vendor(emitter.target) not in ("cuda", "rocm") or emitter.dot_dt != "f32":
        return []
    if "ieee" not in dot_precision(p.func, "f32") or not isinstance(p.M, int) or p.M < MIN_ROWS:
        return []

    def n_last(i, idx):
        classes = [emitter.lin_cls(lin) for lin in idx]
        n_dims = [j for j, c in enumerate(classes) if c == {"n"}]
        if i in emitter.a_inputs or len(idx) < 2 or not n_dims or not any(c == {"k"} for c in classes):
            return KEEP  # read by both tiles, or no plain N dim: as it is
        if any(c & {"n"} and c != {"n"} for c in classes):
            return KEEP  # N mixed with other dims in one index
        # N split over several dims (a projection's output viewed as heads x head dim: the weight
        # read as [heads, head dim, K]): all of them innermost, in the tensor's order
        return n_dims if len(n_dims) > 1 else n_dims[0]

    return last_dim_orders(emitter.b_loads, n_last)


KEEP, SKIP = None, -1


def last_dim_orders(loads, dim_to_last) -> list:
    """[(input, dim order)] for the launch plan (KernelSource.relayout): per input, the tensor dim
    `dim_to_last(input, index per dim)` (or list of dims, kept in that order) moved innermost. It
    returns KEEP where the input must stay as it is, SKIP for a load that says nothing about its
    layout; an input whose loads disagree stays too, and orders that already are the identity are
    left out."""
    orders: dict = {}
    for i, idx in loads:
        j = dim_to_last(i, idx)
        if not isinstance(j, list) and j == SKIP:
            continue
        last = j if isinstance(j, list) else [j]
        order = None if j is KEEP else [x for x in range(len(idx)) if x not in last] + last
        orders[i] = order if order is not None and orders.get(i, order) == order else None
    return [(i, order) for i, order in sorted(orders.items())
            if order is not None and order != list(range(len(order)))]


__all__ = ["fma_relayout", "last_dim_orders", "KEEP", "SKIP", "MIN_ROWS"]
