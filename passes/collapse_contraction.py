"""A collapse of a contraction's result folds into the contraction, part of `uniorch-preprocess`.

Swin's windowed attention computes q·kᵀ per window over the window's rows and columns as separate
dims (4 x 4 queries against 4 x 4 keys), then collapses them to 16 x 16 scores for the relative
position bias, the shift mask and the softmax. Collapsed after it, the contraction's epilogue
cannot take those ops (they run on other dims), the softmax gets a kernel of its own, and the
scores and probabilities are written and read: no flash attention.

Here the contraction iterates over the collapsed dims instead, reading its factors through the
same collapse of their dims (MLIR's fold-reshape-by-collapsing), so the scores come out as the
readers see them and the attention fuses as any other. It applies where every group of merged
dims appears in each factor as one run in the same order (or not at all: a broadcast), and a
merged group holds a query or key dim (one only a single factor reads). Collapses of batch dims
alone are sink_collapse.py's: that keeps grouped-query repeats as index maps.
"""
from __future__ import annotations

import math

from torch_mlir import ir
from torch_mlir.dialects import tensor

from uniorch.codegen import patterns as pat

from .ir_utils import iterator_types_attr
from .ir_utils import producer as _producer
from .ir_utils import reassociation_attr, reassociation_groups

COLLAPSE = "tensor.collapse_shape"


def collapse_into_contractions(func_op: ir.Operation) -> int:
    """Rewrites each qualifying collapse (module doc); returns how many."""
    block = func_op.regions[0].blocks[0]
    done = 0
    for c in [o.operation for o in block.operations if o.operation.name == COLLAPSE]:
        done += _fold(c)
    return done


def _dims(m: ir.AffineMap) -> list[int] | None:
    if not all(isinstance(x, ir.AffineDimExpr) for x in m.results):
        return None
    return [ir.AffineDimExpr(x).position for x in m.results]


def _fold(c: ir.Operation) -> int:
    p = _producer(c.operands[0])
    res_ty = ir.RankedTensorType(c.results[0].type)
    if p is None or not pat.is_generic(p) or len(p.results) != 1 or pat.num_inputs(p) != 2 \
            or "reduction" not in pat.iterator_types(p) or not res_ty.has_static_shape:
        return 0
    if any(pat.op_of(u.owner) != c for u in p.results[0].uses) \
            or any(o.name == "linalg.index" for o in pat.body_ops(p)):
        return 0
    maps = [_dims(m) for m in pat.indexing_maps(p)]
    if any(m is None for m in maps):
        return 0  # a window (convolution) or a constant index
    its = pat.iterator_types(p)
    out = maps[-1]
    loop_groups = [[out[i] for i in g] for g in reassociation_groups(c)]
    merged = [g for g in loop_groups if len(g) > 1]
    a, b = set(maps[0]), set(maps[1])
    if not any(any((d in a) != (d in b) for d in g) for g in merged):
        return 0  # batch dims only (sink_collapse.py's)
    covered = {d for g in loop_groups for d in g}
    groups = loop_groups + [[d] for d in range(len(its)) if d not in covered]
    groups.sort(key=lambda g: g[0])
    new_of = {}
    for j, g in enumerate(groups):
        if len({its[d] for d in g}) != 1:
            return 0
        for d in g:
            new_of[d] = j
    new_maps, operand_groups = [], []
    for m in maps:
        res, grp, i = [], [], 0
        while i < len(m):
            g = groups[new_of[m[i]]]
            if m[i:i + len(g)] != g:
                return 0  # a merged group split up or reordered in this operand
            res.append(new_of[m[i]])
            grp.append(list(range(i, i + len(g))))
            i += len(g)
        new_maps.append(res)
        operand_groups.append(grp)
    n = len(groups)
    ins = pat.inputs(p)
    fill = _producer(pat.outputs(p)[0])
    if fill is None or not pat.is_fill(fill) or any(o.name == "linalg.index" for o in pat.body_ops(fill)):
        return 0
    with ir.InsertionPoint(c), c.location:
        new_ins = [v if len(gr) == len(_shape(v)) else _collapsed(v, gr) for v, gr in zip(ins, operand_groups)]
        empty = tensor.EmptyOp(list(res_ty.shape), res_ty.element_type).result
        new_fill = pat.op_of(fill.clone())
        new_fill.operands[len(new_fill.operands) - 1] = empty
        r = res_ty.rank  # the fill's loops are the result's dims
        new_fill.attributes["indexing_maps"] = ir.ArrayAttr.get(
            [ir.AffineMapAttr.get(ir.AffineMap.get(r, 0, []))] * pat.num_inputs(fill)
            + [ir.AffineMapAttr.get(ir.AffineMap.get_identity(r))])
        new_fill.attributes["iterator_types"] = iterator_types_attr(["parallel"] * r)
        new_fill.results[0].set_type(res_ty)
        new = pat.op_of(p.clone())
        for i, v in enumerate(new_ins + [new_fill.results[0]]):
            new.operands[i] = v
        new.attributes["indexing_maps"] = ir.ArrayAttr.get(
            [ir.AffineMapAttr.get(ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(d) for d in m])) for m in new_maps])
        new.attributes["iterator_types"] = iterator_types_attr([its[g[0]] for g in groups])
        new.results[0].set_type(res_ty)
    c.results[0].replace_all_uses_with(new.results[0])
    c.erase()
    p.erase()
    if not list(fill.results[0].uses):
        fill.erase()
    return 1


def _shape(v: ir.Value) -> list[int]:
    return list(ir.RankedTensorType(v.type).shape)


def _collapsed(v: ir.Value, groups: list[list[int]]) -> ir.Value:
    shape = _shape(v)
    out = [math.prod(shape[i] for i in g) for g in groups]
    t = ir.RankedTensorType.get(out, ir.RankedTensorType(v.type).element_type)
    return tensor.CollapseShapeOp(t, v, reassociation_attr(groups)).result
