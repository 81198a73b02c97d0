"""Reductions in the plain form passes/tile_stats.py matches (one input read in loop order).

A pooling whose one window is its whole input is the plain reduction it is.

torch-mlir lowers `adaptive_max_pool2d(x, 1)` (a global max pool: CBAM's channel attention, a
classifier's max-pooled head) as a pooling generic: loops (n, c, oh, ow, kh, kw) reading
x[n, c, oh * H + kh, ow * W + kw] beside a window-shaped input the body never reads, oh and ow
of size 1. That is max over (H, W): loops (n, c, kh, kw) reading x in loop order, which the
passes that take plain reductions (passes/tile_stats.py: partials in a convolution's epilogue)
recognise. `adaptive_avg_pool2d(x, 1)` already comes as a plain sum.

A max (min) of a max (min) is one: torch-mlir lowers `amax(x, (2, 3))` as a max over W, then one
over H, two kernels where one reads x once; as one reduction its rows are one chunk of H x W.
Only maxes and mins are merged: they are exact in any order, where merging sums would change
their rounding.
"""
from __future__ import annotations

from torch_mlir import ir

from uniorch.codegen import patterns as pat

from .ir_utils import build_generic, clone_body, mapped


def as_plain_reduction(op) -> ir.Operation | None:
    """A new generic before `op`, computing its result as a reduction of its first input read in
    loop order, when `op` pools one window (its other inputs only give the window's shape) and
    dropping its size-1 output loops makes the first input's map the identity; else None. The
    caller replaces `op` with it or erases it."""
    if not pat.is_reduction(op) or len(op.results) != 1 or pat.num_inputs(op) < 2:
        return None
    if any(pat.block_arg_used(op, i) for i in range(1, pat.num_inputs(op))):
        return None
    combs = pat.reduction_combiners(op)
    if not combs or len(pat.body_ops(op)) != 1 or combs[0][1] != pat.body(op).arguments[0]:
        return None
    try:
        sizes = pat.loop_sizes(op)
    except (ValueError, KeyError):
        return None
    its = pat.iterator_types(op)
    if any(s is None for s in sizes):
        return None
    drop = [d for d, (t, s) in enumerate(zip(its, sizes)) if t == "parallel" and s == 1]
    if not drop:
        return None
    keep = [d for d in range(len(its)) if d not in drop]
    zero = ir.AffineConstantExpr.get(0)
    new_dim = {d: ir.AffineDimExpr.get(i) for i, d in enumerate(keep)}
    subst = ir.AffineMap.get(len(keep), 0, [new_dim.get(d, zero) for d in range(len(its))])
    maps = pat.indexing_maps(op)
    x_map = ir.AffineMap.get(len(keep), 0, [e.compose(subst) for e in maps[0].results])
    if x_map != ir.AffineMap.get_identity(len(keep)):
        return None
    out_map = ir.AffineMap.get(len(keep), 0, [e.compose(subst) for e in maps[pat.num_inputs(op)].results])
    x = pat.inputs(op)[0]
    blk = pat.body(op)
    n_in = pat.num_inputs(op)
    ops = pat.body_ops(op)
    yielded = pat.yield_op(op).operands[0]
    with ir.InsertionPoint(op):
        def body(args):
            pairs = [(blk.arguments[0], args[0]), (blk.arguments[n_in], args[1])]
            return [mapped(clone_body(ops, pairs), yielded)]
        new = build_generic([x], [pat.outputs(op)[0]], [x_map, out_map], [its[d] for d in keep], body)
    return new


EXTREMA = ("arith.maximumf", "arith.minimumf")


def merge_extrema(func_op, combiners=EXTREMA) -> None:
    """Each reduction in `func_op` with one of `combiners` (a max or min) whose input is only
    another one's with the same combiner, both reading their input in loop order and writing a
    projection of their loops, the inner one starting from the identity or the outer's start,
    replaced by one reduction over the inner one's loops."""
    for op in [pat.op_of(o) for o in func_op.regions[0].blocks[0].operations]:
        inner = _merge_into(op, combiners)
        if inner is None:
            continue
        comb = pat.body_ops(op)[-1].name
        x = pat.inputs(inner)[0]
        inner_out = pat.indexing_maps(inner)[1]
        out_map = ir.AffineMap.get(inner_out.n_dims, 0,
                                   [e.compose(inner_out) for e in pat.indexing_maps(op)[1].results])
        kept = {e.position for e in out_map.results if isinstance(e, ir.AffineDimExpr)}
        its = ["parallel" if d in kept else "reduction" for d in range(inner_out.n_dims)]
        blk = pat.body(inner)
        ops = pat.body_ops(inner)
        with ir.InsertionPoint(op), ir.Location.unknown():
            def body(args):
                return [mapped(clone_body(ops, list(zip(blk.arguments, args))), ops[-1].results[0])]
            new = build_generic([x], [pat.outputs(op)[0]], [pat.indexing_maps(inner)[0], out_map], its, body)
        assert comb == pat.body_ops(new)[-1].name
        op.results[0].replace_all_uses_with(new.results[0])
        op.erase()
        inner.erase()


def _merge_into(op, combiners):
    """The reduction `op` reduces further (see merge_extrema), else None."""
    if not _plain_form(op, combiners) or len(pat.body_ops(op)) != 1:
        return None
    x = pat.inputs(op)[0]
    if isinstance(x.owner, ir.Block) or len(list(x.uses)) != 1:
        return None
    inner = pat.op_of(x.owner)
    if not _plain_form(inner, combiners) or pat.body_ops(inner)[-1].name != pat.body_ops(op)[-1].name:
        return None
    start, outer_start = _fill_value(pat.outputs(inner)[0]), _fill_value(pat.outputs(op)[0])
    identity = pat.COMBINERS[pat.body_ops(op)[-1].name]
    if start is None or not (start == identity or start == outer_start):
        return None
    return inner


def reduced_prefix(op, combiners) -> list | None:
    """The body ops before the combiner if `op` combines f(in) of its one input, read in loop
    order, with one of `combiners`, f's ops reading only `in` and constants; else None."""
    if not pat.is_reduction(op) or pat.num_inputs(op) != 1 or len(op.results) != 1:
        return None
    maps = pat.indexing_maps(op)
    if maps[0] != ir.AffineMap.get_identity(maps[0].n_dims):
        return None
    ops = pat.body_ops(op)
    combs = pat.reduction_combiners(op)
    if not ops or ops[-1].name not in combiners or not combs or combs[0][0] != ops[-1].name:
        return None
    blk = pat.body(op)
    prefix = ops[:-1]
    inside = {blk.arguments[0]} | {r for o in prefix for r in o.results}
    for o in prefix:
        if len(o.results) != 1 or o.name == "tensor.extract":
            return None
        for v in o.operands:  # the accumulator is a block argument: not read before the combiner
            if not (v in inside or (not isinstance(v.owner, ir.Block) and pat.op_of(v.owner).name == "arith.constant")):
                return None
    return prefix if combs[0][1] in inside else None


def _plain_form(op, combiners) -> bool:
    """reduced_prefix's form, with an output that is a projection of the loops."""
    return reduced_prefix(op, combiners) is not None and pat.indexing_maps(op)[1].is_projected_permutation


def _fill_value(v) -> float | None:
    """The constant a fill generic writes into `v`, else None."""
    if isinstance(v.owner, ir.Block):
        return None
    fill = pat.op_of(v.owner)
    if not pat.is_generic(fill) or not pat.is_fill(fill):
        return None
    yielded = pat.yield_op(fill).operands[0]
    blk = pat.body(fill)
    if yielded == blk.arguments[0] and pat.inputs(fill):
        c = pat.inputs(fill)[0]
    else:
        c = yielded
    if isinstance(c.owner, ir.Block) or pat.op_of(c.owner).name != "arith.constant":
        return None
    try:
        return ir.FloatAttr(pat.op_of(c.owner).attributes["value"]).value
    except (ValueError, TypeError):
        return None


__all__ = ["as_plain_reduction", "merge_extrema", "reduced_prefix"]
