"""A pointwise op reading a matmul's result through a splitting view runs on the matmul's own dims,
part of `uniorch-preprocess`.

`linear(x).view(b, t, heads, d)` followed by the bias add: upstream's reshape propagation (in
elementwise fusion, while the matmul is still a named op) moves the view above the add, so the add
iterates over (b, t, heads, d) and reads the matmul's (b, t, heads * d) result through the view.
Fusion then sees a view between the contraction and its epilogue, and the add becomes a kernel of
its own that writes the whole activation once more. The same when the view reads a pointwise
value of the matmul's (a training forward saves `addmm`'s output in 2-D and views it as (batch,
tokens) for the GELU). Here such an op is rewritten over the merged
dims, each operand read through the inverse view (the view's source, or a collapse of the
operand), and the view moves after it: the add is the contraction's epilogue again.

Only dims every operand reads together, in order, merge (a bias over heads * d, yes; RoPE's cos
read along d but not heads, no), and only pointwise ops without `linalg.index` whose other operands
are broadcasts (a bias, a scale) are rewritten: a full-size operand such as a residual keeps its
own layout, and rewriting around it cost Swin a kernel.
"""
from __future__ import annotations

import math

from torch_mlir import ir
from torch_mlir.dialects import tensor

from uniorch.codegen import patterns as pat

from .ir_utils import iterator_types_attr
from .ir_utils import producer as _producer
from .sink_collapse import EXPAND, _groups, _reassociation, _shape


def merge_epilogue_dims(func_op: ir.Operation) -> None:
    block = func_op.regions[0].blocks[0]
    for op in [o.operation for o in block.operations]:
        if pat.is_generic(op) and pat.is_pointwise(op):
            _merge(op)


def _from_contraction(v: ir.Value, depth: int = 3) -> bool:
    """v is a contraction's result, or a pointwise op's of it (its bias add: a linear layer's
    output, saved in 2-D by a training forward and viewed as (batch, tokens) for its GELU)."""
    p = _producer(v)
    if p is None or not pat.is_generic(p):
        return False
    if not pat.is_pointwise(p):
        return True
    return depth > 0 and any(isinstance(x.type, ir.RankedTensorType) and _from_contraction(x, depth - 1)
                             for x in pat.inputs(p))


def _runs(g: ir.Operation) -> list[list[int]] | None:
    """Loop dims to merge: those a contraction's result, read through a splitting view, was split into."""
    for v, m in zip(pat.inputs(g), pat.indexing_maps(g)):
        e = _producer(v)
        if e is None or e.name != EXPAND or not _from_contraction(e.operands[0]):
            continue
        if not ir.RankedTensorType(e.operands[0].type).has_static_shape:
            continue
        if any(not isinstance(x, ir.AffineDimExpr) for x in m.results):
            continue
        at, out = [x.position for x in m.results], _shape(e.results[0])
        if not any(sum(out[i] != 1 for i in grp) > 1 for grp in _groups(e)):
            continue  # only unit dims added (a 1-d pooling's 2-d view): nothing split, left as it is
        runs = [[at[i] for i in grp] for grp in _groups(e) if len(grp) > 1]
        if runs and all(r == list(range(r[0], r[0] + len(r))) for r in runs):
            return runs
    return None


def _merged_map(m: ir.AffineMap, runs: list[list[int]], new_pos: dict, n: int):
    """m over the merged dims, with each operand dim group to collapse; None when a run is read partly."""
    exprs, grps, i = [], [], 0
    res = list(m.results)
    starts = {r[0]: r for r in runs}
    inside = {d for r in runs for d in r}
    while i < len(res):
        x = res[i]
        if isinstance(x, ir.AffineDimExpr) and x.position in starts:
            r = starts[x.position]
            got = res[i:i + len(r)]
            if [y.position if isinstance(y, ir.AffineDimExpr) else None for y in got] != r:
                return None
            grps.append(list(range(i, i + len(r))))
            exprs.append(ir.AffineDimExpr.get(new_pos[r[0]]))
            i += len(r)
            continue
        if isinstance(x, ir.AffineDimExpr) and x.position in inside:
            return None  # part of a run only: a broadcast along the rest
        if not isinstance(x, (ir.AffineDimExpr, ir.AffineConstantExpr)):
            return None
        grps.append([i])
        exprs.append(x if isinstance(x, ir.AffineConstantExpr) else ir.AffineDimExpr.get(new_pos[x.position]))
        i += 1
    return ir.AffineMap.get(n, 0, exprs), grps


def _collapsed(v: ir.Value, grps: list[list[int]]) -> ir.Value:
    if all(len(x) == 1 for x in grps):
        return v
    e = _producer(v)
    if e is not None and e.name == EXPAND and _groups(e) == grps:
        return e.operands[0]
    shape = _shape(v)
    new = [1] * len(grps)
    for j, grp in enumerate(grps):
        for i in grp:
            new[j] *= shape[i]
    t = ir.RankedTensorType.get(new, ir.RankedTensorType(v.type).element_type)
    return tensor.CollapseShapeOp(t, v, _reassociation(grps)).result


def _merge(g: ir.Operation) -> None:
    if len(g.results) != 1 or any(o.name == "linalg.index" for o in pat.body_ops(g)):
        return
    runs = _runs(g)
    if runs is None or not ir.RankedTensorType(g.results[0].type).has_static_shape:
        return
    its = pat.iterator_types(g)
    inside = {d: r for r in runs for d in r}
    new_pos, n = {}, 0
    for d in range(len(its)):
        if d in inside and inside[d][0] != d:
            new_pos[d] = new_pos[inside[d][0]]
            continue
        new_pos[d] = n
        n += 1
    operands = list(pat.inputs(g)) + list(pat.outputs(g))
    out_n = math.prod(_shape(g.results[0]))
    viewed = [v for v in pat.inputs(g) if _producer(v) is not None and _producer(v).name == EXPAND
              and _from_contraction(_producer(v).operands[0])]
    for v in pat.inputs(g):
        if isinstance(v.type, ir.RankedTensorType) and not any(v == w for w in viewed) \
                and math.prod(_shape(v)) >= out_n:
            return  # a full-size operand (a residual in its own layout, Swin's windows): left as it is
    merged = []
    for v, m in zip(operands, pat.indexing_maps(g)):
        got = _merged_map(m, runs, new_pos, n)
        if got is None or (not isinstance(v.type, ir.RankedTensorType) and m.n_results):
            return
        if isinstance(v.type, ir.RankedTensorType) and not ir.RankedTensorType(v.type).has_static_shape:
            return
        merged.append(got)
    out_grps = merged[-1][1]
    with ir.InsertionPoint(g), g.location:
        vals = [_collapsed(v, grps) if isinstance(v.type, ir.RankedTensorType) else v
                for v, (_, grps) in zip(operands, merged)]
        new = pat.op_of(g.clone())
    for i, v in enumerate(vals):
        new.operands[i] = v
    new.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m, _ in merged])
    new.attributes["iterator_types"] = iterator_types_attr(["parallel"] * n)
    new.results[0].set_type(vals[-1].type)
    with ir.InsertionPoint(g), g.location:
        back = tensor.ExpandShapeOp(g.results[0].type, new.results[0], _reassociation(out_grps), [],
                                    _shape(g.results[0])).result
    g.results[0].replace_all_uses_with(back)
    g.erase()
