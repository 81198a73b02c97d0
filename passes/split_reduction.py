"""Split reductions, part of `uniorch-preprocess`: a contraction with few outputs and a long reduction
becomes partial sums over one of its reduction dims, then a sum of the partials.

Why: the tiled contraction template runs one program per output tile, and each program walks the
whole reduction. A convolution's weight gradient has the opposite shape of a forward pass: a few
thousand outputs (channels x channels x window) summed over batch x height x width. ResNet's 64-channel
3x3 layers at batch 32 and 56x56 pixels are 36 programs each walking 100k products: on an H200 six
such kernels took 23 ms each (bench/results/2026-11-26-h200-run2, resnet_stack_train), where the
whole eager training step took 5.8 ms. As Inductor's split reductions, the first generic keeps the
split dim as a parallel (batch) dim of its output, so there are that many times more programs, and
a small reduction generic adds the partials to the original accumulator (bias or zero):

    out = init + sum_s (sum_k a[s, k] * b[s, k])

A reduction dim that is already a loop of its own and read plainly (the batch of a weight
gradient: not inside `oh + kh`) splits, with 4 to 64 partials; a matmul's one long reduction dim
(a linear layer's weight gradient, summed over batch x tokens rows) is first split in two through
views of its operands (sink_collapse's loop split, the views moved above a transposed factor so
the matmul still reads it in place), then over the first part; the outputs are float32 or float64
(the partials are in the accumulator's type, so nothing is rounded twice); the reduction left in
each partial stays long (`MIN_PER_PARTIAL`). Sums in another order than one long loop: the result
differs from eager's by rounding only.
"""
from __future__ import annotations

import math

from torch_mlir import ir
from torch_mlir.dialects import tensor

from uniorch.codegen import patterns as pat

from .ir_utils import iterator_types_attr

# few outputs: under this many output elements (16 tiles of 64x64) a GPU has few programs to run
MAX_OUTPUTS = 64 * 64 * 16
MIN_REDUCTION = 8192     # products summed per output before a split pays for its second kernel
MIN_PER_PARTIAL = 512    # ... and per partial after it
MAX_PARTIALS = 64


def split_reductions(func_op: ir.Operation) -> None:
    block = func_op.regions[0].blocks[0]
    for op in [o.operation for o in block.operations]:
        if pat.is_generic(op) and len(op.results) == 1:
            d = _split_dim(op)
            if d is None:
                op, d = _split_loop(op)
            if d is not None:
                _split(op, d)


def _split_loop(op: ir.Operation):
    """A matmul whose one long reduction dim (a linear layer's weight gradient: batch x tokens) is
    read plainly: that dim split in two, (partials, rest), through views of its operands
    (sink_collapse's loop split); (the new op, the partials' dim) or (op, None)."""
    from .sink_collapse import _bubble, split_loops

    if not pat.is_contraction(op) or not _few_outputs_long_sum(op):
        return op, None
    sizes, its = pat.loop_sizes(op), pat.iterator_types(op)
    red = [d for d, it in enumerate(its) if it == "reduction"]
    if len(red) != 1:
        return op, None
    d = red[0]
    parts = next((p for p in (64, 32, 16, 8, 4) if sizes[d] % p == 0 and sizes[d] // p >= MIN_PER_PARTIAL), None)
    if parts is None:
        return op, None
    done = split_loops(op, {d: [parts, sizes[d] // parts]})
    if done is None:
        return op, None
    new = done[0]
    # a transposed factor (dyᵀ) is read in place by the matmul, but not through a view: the views
    # move above such producers (bubble_expands), as they would have before the split
    work = [pat.op_of(v.owner) for v in pat.inputs(new) if not isinstance(v.owner, ir.Block)
            and pat.op_of(v.owner).name == "tensor.expand_shape"]
    while work:
        work.extend(_bubble(work.pop()) or [])
    return new, d  # d: the partials' dim; d + 1 the rest


def _few_outputs_long_sum(op: ir.Operation) -> bool:
    out_t = ir.RankedTensorType(op.results[0].type)
    if not out_t.has_static_shape or str(out_t.element_type) not in ("f32", "f64"):
        return False
    sizes, its = pat.loop_sizes(op), pat.iterator_types(op)
    if not all(isinstance(s, int) for s in sizes):
        return False
    outputs = math.prod(s for s, it in zip(sizes, its) if it == "parallel")
    reduction = math.prod(s for s, it in zip(sizes, its) if it == "reduction")
    return outputs <= MAX_OUTPUTS and reduction >= MIN_REDUCTION


def _split_dim(op: ir.Operation) -> int | None:
    """The reduction dim to split `op` over, or None when it stays one generic."""
    if not (pat.is_contraction(op) or pat.is_convolution(op)):
        return None
    if not _few_outputs_long_sum(op):
        return None
    sizes, its = pat.loop_sizes(op), pat.iterator_types(op)
    reduction = math.prod(s for s, it in zip(sizes, its) if it == "reduction")
    maps = pat.indexing_maps(op)
    n_in = pat.num_inputs(op)
    best = None
    for d, (s, it) in enumerate(zip(sizes, its)):
        if it != "reduction" or not 4 <= s <= MAX_PARTIALS or reduction // s < MIN_PER_PARTIAL:
            continue
        plain = True
        for m in maps[:n_in]:
            for e in m.results:
                if d in pat.map_dims(ir.AffineMap.get(m.n_dims, 0, [e])) and not isinstance(e, ir.AffineDimExpr):
                    plain = False  # inside a sum (a window's oh + kh): not a loop of its own
        if plain and (best is None or s > sizes[best]):
            best = d
    return best


def _split(op: ir.Operation, d: int) -> None:
    sizes, its = pat.loop_sizes(op), pat.iterator_types(op)
    maps = pat.indexing_maps(op)
    n_in = pat.num_inputs(op)
    n = len(sizes)
    out_t = ir.RankedTensorType(op.results[0].type)
    elem = out_t.element_type
    loc = op.location
    with ir.InsertionPoint(op), loc:
        part_t = ir.RankedTensorType.get([sizes[d]] + list(out_t.shape), elem)
        zero = _zeros(part_t)
        part = pat.op_of(op.clone())
        part.operands[n_in] = zero
        out_map = maps[n_in]
        part_map = ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(d)] + list(out_map.results))
        part.attributes["indexing_maps"] = ir.ArrayAttr.get(
            [ir.AffineMapAttr.get(m) for m in maps[:n_in]] + [ir.AffineMapAttr.get(part_map)])
        new_its = ["parallel" if k == d else it for k, it in enumerate(its)]
        part.attributes["iterator_types"] = iterator_types_attr(new_its)
        part.results[0].set_type(part_t)
        # (upstream's cache of a named op's maps describes the op before the split)
        for name in ("uniorch.group", "uniorch.kind", "uniorch.domain", "linalg.memoized_indexing_maps"):
            if name in part.attributes:
                del part.attributes[name]
        total = _sum_partials(part.results[0], op.operands[n_in], out_t)
    op.results[0].replace_all_uses_with(total)
    op.erase()


def _zeros(t: ir.RankedTensorType, value: float = 0.0) -> ir.Value:
    """A generic filling `t` with 0, or `value` (the form fusion takes into a contraction's
    accumulator)."""
    elem = t.element_type
    rank = len(t.shape)
    empty = tensor.EmptyOp(list(t.shape), elem).result
    cst = ir.Operation.create("arith.constant", results=[elem],
                              attributes={"value": ir.FloatAttr.get(elem, value)}).results[0]
    fill = ir.Operation.create(
        "linalg.generic", results=[t], operands=[cst, empty],
        attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(ir.AffineMap.get(rank, 0, [])),
                                                       ir.AffineMapAttr.get(ir.AffineMap.get_identity(rank))]),
                    "iterator_types": iterator_types_attr(["parallel"] * rank),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1])},
        regions=1)
    blk = fill.regions[0].blocks.append(elem, elem, arg_locs=[ir.Location.unknown()] * 2)
    with ir.InsertionPoint(blk):
        ir.Operation.create("linalg.yield", operands=[blk.arguments[0]])
    return fill.results[0]


def _sum_partials(partials: ir.Value, init: ir.Value, out_t: ir.RankedTensorType) -> ir.Value:
    """init + the partials summed over their leading dim: loops (output dims..., partial)."""
    rank = len(out_t.shape)
    elem = out_t.element_type
    dims = [ir.AffineDimExpr.get(i) for i in range(rank + 1)]
    in_map = ir.AffineMap.get(rank + 1, 0, [dims[rank]] + dims[:rank])
    out_map = ir.AffineMap.get(rank + 1, 0, dims[:rank])
    red = ir.Operation.create(
        "linalg.generic", results=[out_t], operands=[partials, init],
        attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(in_map), ir.AffineMapAttr.get(out_map)]),
                    "iterator_types": iterator_types_attr(["parallel"] * rank + ["reduction"]),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1])},
        regions=1)
    blk = red.regions[0].blocks.append(elem, elem, arg_locs=[ir.Location.unknown()] * 2)
    with ir.InsertionPoint(blk):
        s = ir.Operation.create("arith.addf", results=[elem], operands=[blk.arguments[1], blk.arguments[0]]).results[0]
        ir.Operation.create("linalg.yield", operands=[s])
    return red.results[0]


__all__ = ["split_reductions", "MAX_OUTPUTS", "MIN_REDUCTION", "MIN_PER_PARTIAL", "MAX_PARTIALS"]
