"""Sinks batch-merging collapses below the ops that read them, part of `uniorch-preprocess`.

Grouped-query attention repeats k and v for each query head of a group
(`k[:, :, None].expand(b, g, r, t, d).reshape(b, g * r, t, d)`: Llama's `repeat_kv`, or
`repeat_interleave`). After canonicalisation q·kᵀ is a contraction over (b, g, r) whose scores are
collapsed to (b, h) for the mask and the softmax, and v's repeat is materialised and collapsed to
(b, h) to feed P·v: the two contractions no longer agree on their batch dims, so attention does not
fuse, and the copy of v is a kernel of its own.

Here every op reading such a collapse is rewritten to iterate over the uncollapsed dims instead
(MLIR's fold-reshape-by-expansion), reading the collapse's source and giving its results collapsed
back for whoever reads them, which is then rewritten the same way. Only collapses that merge a
repeat's dims or a contraction's batch dims start it, and only parallel dims are split, so the
chain stays in (b, g, r) down to P·v: both repeats become index maps of the contractions reading
them, and the attention pass sees one batch layout.
"""
from __future__ import annotations

import math

from torch_mlir import ir
from torch_mlir.dialects import tensor

from uniorch.codegen import patterns as pat

from .ir_utils import iterator_types_attr
from .ir_utils import producer as _producer
from .ir_utils import reassociation_attr as _reassociation
from .ir_utils import reassociation_groups as _groups
from .view_rewrites import _static_slice

COLLAPSE, EXPAND = "tensor.collapse_shape", "tensor.expand_shape"


def sink_collapses(func_op: ir.Operation) -> None:
    block = func_op.regions[0].blocks[0]
    work = [o.operation for o in block.operations if o.operation.name == COLLAPSE and _starts(o.operation)]
    budget = 10 * len(list(block.operations))  # each step moves a collapse down: bounded, but be sure
    while work and budget > 0:
        budget -= 1
        c = work.pop()
        users: list = []
        for u in c.results[0].uses:
            o = pat.op_of(u.owner)
            if not any(o == x for x in users):
                users.append(o)
        for user in users:
            if pat.is_generic(user):
                work.extend(_expand_generic(user) or [])
            elif user.name == EXPAND:
                work.extend(_swap(c, user) or [])
        if not list(c.results[0].uses):
            c.erase()


def bubble_expands(func_op: ir.Operation) -> None:
    """Splitting views move up through the ops computing what they view when nothing else reads
    it: pointwise ops (as upstream's fold-reshape-by-expansion moves them), and here also
    concatenations along other dims and slices keeping the split dims whole, which upstream stops
    at. Grouped-query attention views q as (b, g, r) heads after RoPE; with the view moved back
    to q in memory, RoPE's rotate_half is computed in the attention kernel's query prologue
    instead of written for the view."""
    block = func_op.regions[0].blocks[0]
    work = [o.operation for o in block.operations if o.operation.name == EXPAND]
    budget = 10 * len(list(block.operations))
    while work and budget > 0:
        budget -= 1
        e = work.pop()
        if not _merge_twins(e, work):
            continue
        made = _bubble(e)
        if made is not None:
            work.extend(made)


def _merge_twins(e: ir.Operation, work: list) -> bool:
    """Equal views of a generated table become `e` (RoPE concatenates its frequencies with
    themselves: two views of one table), so the table's producer has one reader and can move
    behind it. False when `e` itself is gone."""
    if not list(e.results[0].uses):
        e.erase()
        return False
    src = _producer(e.operands[0])
    if src is None or not _generates(src):
        return True  # (views of other values keep their own readers' layouts: GQA's k and v)
    twins = [t for t in (pat.op_of(u.owner) for u in e.operands[0].uses)
             if t != e and t.name == EXPAND and t.results[0].type == e.results[0].type and _groups(t) == _groups(e)]
    if twins:
        e.move_after(src)  # before every twin's reader
    for twin in twins:
        twin.results[0].replace_all_uses_with(e.results[0])
        if twin in work:
            work.remove(twin)
        twin.erase()
    return True


def _bubble(e: ir.Operation) -> list | None:
    """expand(p(x...)) → p'(expand(x)...) for e's sole-use producer p; returns the new views."""
    p = _producer(e.operands[0])
    if p is None or len(p.results) != 1 or not ir.RankedTensorType(e.results[0].type).has_static_shape:
        return None
    if any(pat.op_of(u.owner) != e for u in p.results[0].uses):
        return None
    if p.name == COLLAPSE:  # a merge split again (the view of the scores another view made)
        made = _swap(p, e)
        if made is None:
            return None
        p.erase()
        return [q for q in (_producer(c.operands[0]) for c in made) if q is not None and q.name == EXPAND]
    groups, out = _groups(e), _shape(e.results[0])
    split = {j: [out[i] for i in g] for j, g in enumerate(groups) if len(g) > 1}
    if (p.name != "tensor.concat" and not any(sum(n != 1 for n in sizes) > 1 for sizes in split.values())
            and not _generates(p)):
        return None  # only unit dims added (a bias viewed for its broadcast): upstream's to fold
    if pat.is_pointwise(p):
        if pat.indexing_maps(p)[-1] != ir.AffineMap.get_identity(len(groups)):
            return None
        for v, m in zip(pat.inputs(p), pat.indexing_maps(p)):
            q = _producer(v)
            if q is not None and pat.is_generic(q) and not pat.is_pointwise(q) and pat.map_dims(m) & set(split) \
                    and not _channels_splittable(q, v, m, split):
                return None  # a view between a reduction and its consumer hides that epilogue (softmax's)
        made = _rewrite(p, split)
        if made is None:
            return None
        views = []
        for c in made:
            views += _views_read(_producer(c.operands[0]))
            for u in list(c.results[0].uses):
                if pat.op_of(u.owner).name == EXPAND:
                    _swap(c, pat.op_of(u.owner))
            if not list(c.results[0].uses):
                c.erase()
        return views
    if _is_convolution(p):
        return _split_channels(p, e, split)
    if p.name == "tensor.concat":
        dim = ir.IntegerAttr(p.attributes["dim"]).value
        if dim in split:
            return None
        with ir.InsertionPoint(e), e.location:
            pieces = [_expanded(v, groups, _piece_shape(out, groups, dim, _shape(v)[dim])) for v in p.operands]
            new_dim = groups[dim][0]
            cat = tensor.ConcatOp(e.results[0].type, new_dim, pieces)
        e.results[0].replace_all_uses_with(cat.result)
        e.erase()
        p.erase()
        return [pat.op_of(v.owner) for v in pieces]
    if p.name == "tensor.extract_slice":
        sl = _static_slice(p)
        src = p.operands[0]
        if sl is None or not ir.RankedTensorType(src.type).has_static_shape:
            return None
        offs, sizes = sl
        if any(offs[j] != 0 or sizes[j] != _shape(src)[j] for j in split):
            return None  # a slice along a split dim
        src_shape = [n for j, g in enumerate(groups) for n in ([_shape(src)[j]] if len(g) == 1 else split[j])]
        x_offs = [o for j, g in enumerate(groups) for o in ([offs[j]] if len(g) == 1 else [0] * len(g))]
        with ir.InsertionPoint(e), e.location:
            view = _expanded(src, groups, src_shape)
            new = pat.op_of(p.clone())
        new.operands[0] = view
        new.attributes["static_offsets"] = ir.DenseI64ArrayAttr.get(x_offs)
        new.attributes["static_sizes"] = ir.DenseI64ArrayAttr.get(out)
        new.attributes["static_strides"] = ir.DenseI64ArrayAttr.get([1] * len(out))
        new.results[0].set_type(e.results[0].type)
        e.results[0].replace_all_uses_with(new.results[0])
        e.erase()
        p.erase()
        return [pat.op_of(view.owner)] if _producer(view) is not None and _producer(view).name == EXPAND else []
    return None


def _is_convolution(p: ir.Operation) -> bool:
    """A contraction reading its input through a window (a loop sum in an input's map)."""
    if not pat.is_generic(p) or pat.is_pointwise(p) or "reduction" not in pat.iterator_types(p):
        return False
    return any(not isinstance(x, (ir.AffineDimExpr, ir.AffineConstantExpr))
               for m in pat.indexing_maps(p)[:pat.num_inputs(p)] for x in m.results)


def _channels_splittable(q: ir.Operation, v: ir.Value, m: ir.AffineMap, split: dict) -> bool:
    """Whether convolution `q`, whose sole reader reads it as `v` through map `m`, can take the
    split of loop dims `split` itself (`_split_channels`, when the view reaches it next)."""
    if not _is_convolution(q) or len(list(q.results[0].uses)) != 1 or m != pat.indexing_maps(
            pat.op_of(list(q.results[0].uses)[0].owner))[-1]:
        return False
    loops = _channel_loops(q, split)
    return loops is not None and _can_split(q, loops)


def _channel_loops(p: ir.Operation, split: dict[int, list[int]]) -> dict[int, list[int]] | None:
    """`split` (result dim -> sizes) as loop dims of `p`, or None unless each is a parallel loop."""
    out_map, its = pat.indexing_maps(p)[-1], pat.iterator_types(p)
    loops = {}
    for j, sizes in split.items():
        x = out_map.results[j]
        if not isinstance(x, ir.AffineDimExpr) or its[x.position] != "parallel":
            return None
        loops[x.position] = sizes
    return loops


def _split_channels(p: ir.Operation, e: ir.Operation, split: dict[int, list[int]]) -> list | None:
    """A view splitting a convolution's output channels (pixel_shuffle's, a channel shuffle's):
    the convolution computes the split dims itself, its weight and bias read through the same
    view. The permute that follows is then a reordering of the convolution's own loops, stored by
    its epilogue, instead of a copy kernel writing the activation once more."""
    loops = _channel_loops(p, split)
    done = None if loops is None else split_loops(p, loops)
    if done is None:
        return None
    new, made = done
    for c in made:
        for u in list(c.results[0].uses):
            if pat.op_of(u.owner).name == EXPAND:
                _swap(c, pat.op_of(u.owner))
        if not list(c.results[0].uses):
            c.erase()
    return _views_read(new)


def _piece_shape(out: list[int], groups: list[list[int]], dim: int, n: int) -> list[int]:
    """The expanded shape of a concatenation's piece that is `n` long along (unsplit) `dim`."""
    return [n if j == dim else out[i] for j, g in enumerate(groups) for i in g]


def _views_read(op: ir.Operation) -> list:
    return [_producer(v) for v in op.operands if _producer(v) is not None and _producer(v).name == EXPAND]



def _shape(v: ir.Value) -> list[int]:
    return list(ir.RankedTensorType(v.type).shape)


def _starts(c: ir.Operation) -> bool:
    """A collapse merging a repeat's dims or a contraction's batch dims (directly, or through
    pointwise ops computing from it: the scores' scale)."""
    if not ir.RankedTensorType(c.operands[0].type).has_static_shape:
        return False
    merged = [g for g in _groups(c) if len(g) > 1]
    return bool(merged) and _from_batch(c.operands[0], [i for g in merged for i in g], 4)


def _from_batch(v: ir.Value, positions: list[int], depth: int) -> bool:
    """Whether dims `positions` of `v` are batch dims of the contraction computing `v`, or dims a
    pointwise op computing `v` broadcasts along (a repeat), or pointwise-computed from such a
    value's same dims."""
    p = _producer(v)
    if p is None or not pat.is_generic(p) or len(p.results) != 1 or depth == 0:
        return False
    out_map = pat.indexing_maps(p)[-1]
    dims = [e.position if isinstance(e, ir.AffineDimExpr) else None for e in out_map.results]
    its = pat.iterator_types(p)
    ds = [dims[i] for i in positions]
    if any(d is None or its[d] != "parallel" for d in ds):
        return False
    in_maps = pat.indexing_maps(p)[:pat.num_inputs(p)]
    if _is_convolution(p):  # a grouped convolution's (group, channel) dims
        return True
    if pat.is_contraction(p):  # batch dims: read by every operand
        return all(d in pat.map_dims(m) for m in in_maps for d in ds)
    if not pat.is_pointwise(p):
        return False
    read = set().union(*(pat.map_dims(m) for m in in_maps)) if in_maps else set()
    if any(d not in read for d in ds):
        return True  # a repeat (or a computation broadcast along the dim: RoPE applied to repeated k)
    for x, m in zip(pat.inputs(p), in_maps):
        at = {e.position: j for j, e in enumerate(m.results) if isinstance(e, ir.AffineDimExpr)}
        if isinstance(x.type, ir.RankedTensorType) and all(d in at for d in ds) and _from_batch(
                x, [at[d] for d in ds], depth - 1):
            return True
    return False


def _generates(p: ir.Operation) -> bool:
    """A pointwise table computed from its loop indices and smaller tensors (RoPE's positions
    times frequencies): moved behind a view that only adds unit dims, it is recomputed in the
    kernel reading it (attention's query prologue) instead of written as a kernel of its own."""
    if not pat.is_pointwise(p) or not any(o.name == "linalg.index" for o in pat.body_ops(p)):
        return False
    rank = len(pat.iterator_types(p))
    return all(not isinstance(v.type, ir.ShapedType) or len(m.results) < rank
               for v, m in zip(pat.inputs(p), pat.indexing_maps(p)))


def _expand_generic(g: ir.Operation) -> list | None:
    """`g` over the uncollapsed dims of the collapses it reads (where they split parallel loop dims
    only); its results collapsed back. Returns the new collapses, or None if `g` stays as it was."""
    maps = pat.indexing_maps(g)
    its = pat.iterator_types(g)
    operands = list(pat.inputs(g)) + list(pat.outputs(g))
    split: dict[int, list[int]] = {}
    unit_broadcast = from_product = False
    for v, m in zip(operands, maps):
        c = _producer(v)
        if c is None or c.name != COLLAPSE or not ir.RankedTensorType(c.operands[0].type).has_static_shape:
            continue
        src = _shape(c.operands[0])
        for j, grp in enumerate(_groups(c)):
            if len(grp) < 2:
                continue
            e = m.results[j]
            if _unit_broadcast(e, grp, src):
                unit_broadcast = True
                continue
            if not isinstance(e, ir.AffineDimExpr) or its[e.position] != "parallel":
                return None
            p = _producer(c.operands[0])
            from_product = from_product or (p is not None and pat.is_contraction(p))
            sizes = [src[i] for i in grp]
            if split.setdefault(e.position, sizes) != sizes:
                return None
    if pat.is_contraction(g) and pat.num_inputs(g) == 2 and any(
            sum(n != 1 for n in sizes) > 1 and d not in pat.map_dims(maps[0]) for d, sizes in split.items()):
        # a dim only the second factor reads: keys of q·kᵀ (SegFormer's, pixels of a strided
        # convolution) stay one dim, as flash attention and the softmax over them need
        return None
    if not split or (unit_broadcast and not from_product):
        # such a unit view splits nothing, but only the scores of a grouped-query q·kᵀ (Mistral's
        # sliding-window mask added over (kv head, repeat)) go on past it: elsewhere it was where
        # the sinking stopped, and attention fusion matches what it leaves
        return None
    if unit_broadcast:
        _read_unit_sources(g)
    return _rewrite(g, split)


def _unit_broadcast(e, grp: list[int], src: list[int]) -> bool:
    """Unit dims of a collapse's source merged into a dim its reader reads at a constant (a
    mask's one head)."""
    return isinstance(e, ir.AffineConstantExpr) and all(src[i] == 1 for i in grp)


def _read_unit_sources(g: ir.Operation) -> None:
    """`g` reads the source of each collapse that only merges unit dims into a dim it reads as 0,
    at 0 in each of them, instead of the view (so the mask's generic, not a view of it, is what
    the scores' kernel computes inline)."""
    maps = pat.indexing_maps(g)
    new_maps = list(maps)
    for i, (v, m) in enumerate(zip(pat.inputs(g), maps)):
        c = _producer(v)
        if c is None or c.name != COLLAPSE or not ir.RankedTensorType(c.operands[0].type).has_static_shape:
            continue
        src = _shape(c.operands[0])
        exprs = []
        for j, grp in enumerate(_groups(c)):
            e = m.results[j]
            if len(grp) == 1:
                exprs.append(e)
            elif _unit_broadcast(e, grp, src):
                exprs += [ir.AffineConstantExpr.get(0)] * len(grp)
            else:
                break
        else:
            g.operands[i] = c.operands[0]
            new_maps[i] = ir.AffineMap.get(m.n_dims, 0, exprs)
    g.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps])


def _rewrite(g: ir.Operation, split: dict[int, list[int]]) -> list | None:
    """`g` with loop dims `split` into the given sizes, its operands viewed to match; its results
    collapsed back. Returns the new collapses, or None if `g` stays as it was."""
    done = split_loops(g, split)
    return None if done is None else done[1]


def split_loops(g: ir.Operation, split: dict[int, list[int]]):
    """`_rewrite`, returning (the new generic, the new collapses), or None."""
    if not _can_split(g, split):
        return None
    maps = pat.indexing_maps(g)
    its = pat.iterator_types(g)
    operands = list(pat.inputs(g)) + list(pat.outputs(g))
    new_pos, n = {}, 0
    for d in range(len(its)):
        new_pos[d] = n
        n += len(split.get(d, [1]))
    new_its = [its[d] for d in range(len(its)) for _ in split.get(d, [1])]

    new_vals, new_maps, out_groups = [], [], []
    with ir.InsertionPoint(g), g.location:
        for k, (v, m) in enumerate(zip(operands, maps)):
            exprs, grps, shape = [], [], []
            for p, e in enumerate(m.results):
                if isinstance(e, ir.AffineDimExpr) and e.position in split:
                    sizes = split[e.position]
                    grps.append(list(range(len(exprs), len(exprs) + len(sizes))))
                    exprs += [ir.AffineDimExpr.get(new_pos[e.position] + i) for i in range(len(sizes))]
                    shape += sizes
                else:
                    grps.append([len(exprs)])
                    exprs.append(_renumber(e, new_pos, n))
                    shape.append(_shape(v)[p])
            new_maps.append(ir.AffineMap.get(n, 0, exprs))
            if k >= pat.num_inputs(g):
                out_groups.append(grps)
            if not isinstance(v.type, ir.RankedTensorType) or len(shape) == len(_shape(v)):
                new_vals.append(v)  # a scalar, or nothing split
            else:
                new_vals.append(_expanded(v, grps, shape))
        new = pat.op_of(g.clone())
    for i, v in enumerate(new_vals):
        new.operands[i] = v
    new.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in new_maps])
    new.attributes["iterator_types"] = iterator_types_attr(new_its)
    outs = new_vals[pat.num_inputs(g):]
    for r, v in zip(new.results, outs):
        r.set_type(v.type)
    for o in pat.body_ops(new):
        if o.name == "linalg.index":
            d = ir.IntegerAttr(o.attributes["dim"]).value
            # a dim split into unit dims and one more: its index is that one's
            at = next((i for i, n in enumerate(split[d]) if n != 1), 0) if d in split else 0
            o.attributes["dim"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), new_pos[d] + at)
    made = []
    with ir.InsertionPoint(g), g.location:
        for old, r, grps in zip(g.results, new.results, out_groups):
            if _shape(r) == _shape(old):
                old.replace_all_uses_with(r)
                continue
            c = tensor.CollapseShapeOp(old.type, r, _reassociation(grps))
            old.replace_all_uses_with(c.result)
            made.append(pat.op_of(c.operation))
    g.erase()
    return new, made


def _can_split(g: ir.Operation, split: dict[int, list[int]]) -> bool:
    for m in pat.indexing_maps(g):
        for e in m.results:
            if not isinstance(e, (ir.AffineDimExpr, ir.AffineConstantExpr)) and pat.map_dims(
                    ir.AffineMap.get(m.n_dims, 0, [e])) & set(split):
                return False  # a split dim inside an expression (d1 + d2): not rewritten
    for o in pat.body_ops(g):
        d = ir.IntegerAttr(o.attributes["dim"]).value if o.name == "linalg.index" else None
        if d in split and sum(n != 1 for n in split[d]) > 1:
            return False  # the index of a dim split in two: not rewritten
    return True


def _renumber(e, new_pos: dict, n: int):
    """A map result over the old dims, over the new ones (dims not split keep one position)."""
    if isinstance(e, ir.AffineDimExpr):
        return ir.AffineDimExpr.get(new_pos[e.position])
    if isinstance(e, ir.AffineConstantExpr):
        return e
    old_n = max(new_pos) + 1
    sub = ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(new_pos[d]) for d in range(old_n)])
    return e.compose(sub)  # (AffineMap has no compose in these bindings; AffineExpr does)


def _expanded(v: ir.Value, groups: list[list[int]], shape: list[int]) -> ir.Value:
    """`v` split as `groups` says: the collapse's source when `v` is that collapse, else a view."""
    c = _producer(v)
    if c is not None and c.name == COLLAPSE and _groups(c) == groups and _shape(c.operands[0]) == shape:
        return c.operands[0]
    t = ir.RankedTensorType.get(shape, ir.RankedTensorType(v.type).element_type)
    return tensor.ExpandShapeOp(t, v, _reassociation(groups), [], shape).result


def _swap(c: ir.Operation, e: ir.Operation) -> list | None:
    """expand(collapse(x)) where the expand splits only dims the collapse kept: the expand first
    (on x), then a collapse to the same result. Returns the new collapse, or None."""
    rc, re = _groups(c), _groups(e)
    if rc == re and _shape(c.operands[0]) == _shape(e.results[0]):  # the expand undoes the collapse
        e.results[0].replace_all_uses_with(c.operands[0])
        e.erase()
        return []
    x = c.operands[0]
    xs, es = _shape(x), _shape(e.results[0])
    ex_groups, shape, co_groups = [], [], []
    for a, b in zip(rc, re):
        if len(a) > 1 and len(b) > 1:  # merged, then split otherwise: one reshape between the two
            if not _regroup([xs[i] for i in a], [es[i] for i in b], ex_groups, shape, co_groups):
                return None
        elif len(a) == 1:  # x's dim a[0] split as the expand splits it; each piece its own group after
            start = len(shape)
            ex_groups.append(list(range(start, start + len(b))))
            shape += [es[i] for i in b]
            co_groups += [[i] for i in range(start, start + len(b))]
        else:  # merged by the collapse, kept by the expand: x's dims as they are, merged after
            start = len(shape)
            for i in a:
                ex_groups.append([len(shape)])
                shape.append(xs[i])
            co_groups.append(list(range(start, len(shape))))
    if math.prod(shape) != math.prod(xs):
        return None
    with ir.InsertionPoint(e), e.location:
        t = ir.RankedTensorType.get(shape, ir.RankedTensorType(x.type).element_type)
        ex = x if len(ex_groups) == len(shape) else tensor.ExpandShapeOp(t, x, _reassociation(ex_groups), [],
                                                                         shape).result
        if len(co_groups) == len(shape):  # (Bloom's scores: [b * h * 1] split as [b, h] drops a unit dim)
            e.results[0].replace_all_uses_with(ex)
            e.erase()
            return []
        new = tensor.CollapseShapeOp(e.results[0].type, ex, _reassociation(co_groups))
    e.results[0].replace_all_uses_with(new.result)
    e.erase()
    return [pat.op_of(new.operation)]


def _runs(src: list[int], dst: list[int]) -> list[list[int]] | None:
    """Runs of consecutive `src` dims whose sizes multiply to each `dst` dim in turn (trailing unit
    dims join the last run), or None."""
    runs, i = [], 0
    for n in dst:
        if i >= len(src):
            return None
        run, p = [i], src[i]
        i += 1
        while p < n and i < len(src):
            run.append(i)
            p *= src[i]
            i += 1
        if p != n:
            return None
        runs.append(run)
    if any(n != 1 for n in src[i:]) or not runs:
        return None
    runs[-1] += list(range(i, len(src)))
    return runs


def _regroup(xs: list[int], es: list[int], ex_groups: list, shape: list, co_groups: list) -> bool:
    """Dims `xs` of x that a collapse merged and an expand split again as `es`, appended to
    `_swap`'s expand-then-collapse: split where `es` is finer, merged where it is coarser."""
    start = len(shape)
    down = _runs(xs, es) if len(xs) >= len(es) else None
    if down is not None:
        ex_groups += [[start + j] for j in range(len(xs))]
        shape += xs
        co_groups += [[start + j for j in run] for run in down]
        return True
    up = _runs(es, xs)
    if up is None:
        return _with_units(xs, es, ex_groups, shape, co_groups)
    ex_groups += [[start + j for j in run] for run in up]
    shape += es
    co_groups += [[start + j] for j in range(len(es))]
    return True


def _with_units(xs: list[int], es: list[int], ex_groups: list, shape: list, co_groups: list) -> bool:
    """`_regroup` where the split ends in unit dims the merged dims do not have: SDPA's keepdim max
    over a cross-attention's scores, whose queries are a UNet's pixels (rows, columns), reads them
    merged to [b, h, 16] and split again as [b, h, 16, 1]. x's last dim takes the unit dims in the
    expand, and the collapse merges the rest as the split says; without this the max stayed over
    the merged queries, a group apart from the rest of the softmax, and no flash kernel formed."""
    units = 0
    while units < len(es) - 1 and es[-1 - units] == 1:
        units += 1
    down = _runs(xs, es[:-units]) if units and len(xs) >= len(es) - units else None
    if down is None:
        return False
    start = len(shape)
    last = start + len(xs) - 1
    ex_groups += [[start + j] for j in range(len(xs) - 1)] + [list(range(last, last + 1 + units))]
    shape += xs + [1] * units
    co_groups += [[start + j for j in run] for run in down] + [[last + 1 + u] for u in range(units)]
    return True
