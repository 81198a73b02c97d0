"""A product read only in slices becomes a product per slice, part of `uniorch-preprocess`.

GPT-NeoX (Pythia), Bloom, Falcon and Phi-3 compute q, k and v with one projection and take them
apart, often after a head-split view: `qkv.view(B, T, H, 3 * d).chunk(3, -1)` interleaves the parts
per head, so each is a strided slice of the product's output. The cache returns k and v
transposed to (batch, heads, tokens, dim) and rotary embeddings read q and k in pieces; kept
whole, the product writes the fused output and copy kernels write each part again in the layout
its readers take (GPT-NeoX: three permute copies a layer, 17 % of its bytes).

Each slice is a box of the product's parallel loops. Taken up through the elementwise steps
between the product and the slices (a bias add), it becomes a product over that box: operands
that read the sliced loops are read in slices (the weight's rows of one part, a view), the others
whole. A view splitting the output's dims before the slices (Bloom's `view(b, t, h, 3, d)`), or
after a part (its heads), moves into the product's loops first (`sink_collapse.split_loops`), so a
transpose of the part meets the product's own dims and becomes its epilogue's store, the way
Llama's separate q, k and v projections store theirs.

The cost is reading the operands that do not depend on the sliced loops (the input rows) once
per kernel. A single slice (the last token's logits) always splits: less of everything. Several
split where that reads nothing more: equal parts become siblings of one kernel
(passes/fuse_siblings.py: at most MAX_SIBLINGS products of at most MAX_SIBLING_N columns, counting
those already sharing the input), as does a gated MLP's gate/up pair at any width. Otherwise only
where the parts a transpose copies out of the whole output (no contraction folds that transpose
into its indexing), written and read, outweigh the extra reads. Never where two parts meet again
in one concatenation (RoPE's rotated and passed dims of a head: the whole product holds them
together), or where eager returns a part as a view of the whole output: passes/returned_views.py
keeps that view, with the storage the parts share.
"""
from __future__ import annotations

import math

from torch_mlir import ir
from torch_mlir.dialects import tensor

from uniorch.codegen import patterns as pat

from .fuse_siblings import MAX_SIBLING_N, MAX_SIBLINGS
from .ir_utils import (contiguous_strides, erase_dead_pure_ops, reassociation_attr,
                       reassociation_groups)
from .returned_views import LAYOUTS
from .sink_collapse import _bubble, _can_split, _swap, split_loops
from .view_rewrites import _is_constant_fill, refill


def split_sliced_products(func_op: ir.Operation) -> int:
    """Splits every product read only through disjoint static slices; returns how many."""
    block = func_op.regions[0].blocks[0]
    done, again = 0, True
    while again:  # a split erases ops: look again from the start
        again = False
        for op in [o.operation for o in block.operations]:
            if pat.is_generic(op) and pat.is_contraction(op) and _split(op):
                done += 1
                again = True
                break
    if done:
        erase_dead_pure_ops(block)
    return done


def _loop_dims(m: ir.AffineMap) -> list[int] | None:
    """The loop dim of each result of a projected-permutation map; None for anything else."""
    dims = []
    for e in m.results:
        if not isinstance(e, ir.AffineDimExpr):
            return None
        dims.append(e.position)
    return dims if len(set(dims)) == len(dims) else None


def _chain(product: ir.Operation):
    """(chain, view): the product and the elementwise steps that follow it, each the only reader of
    the one before and reading it element for element, up to a value read only by extract_slices
    (view None); or up to a view splitting the last one's dims (Bloom's `qkv.view(b, t, h, 3, d)`)
    with slices further on, which `_expanded_chain` moves into the chain. None if neither."""
    chain = [product]
    while True:
        users = _readers(chain[-1].results[0])
        if not users:
            return None
        if all(u.name == "tensor.extract_slice" for u in users):
            return chain, None
        if len(users) == 1 and users[0].name == "tensor.expand_shape" and _sliced_later(users[0].results[0]):
            return chain, users[0]
        if len(users) != 1 or not _elementwise_over(users[0], chain[-1].results[0]):
            return None
        chain.append(users[0])


def _sliced_later(v: ir.Value) -> bool:
    """Whether `v`, through elementwise steps each the only reader of the one before, is read only
    by extract_slices."""
    while True:
        users = _readers(v)
        if users and all(u.name == "tensor.extract_slice" for u in users):
            return True
        if len(users) != 1 or not _elementwise_over(users[0], v):
            return False
        v = users[0].results[0]


def _readers(v: ir.Value) -> list[ir.Operation]:
    """The ops reading `v`, but views nothing reads (leftovers of earlier rewrites)."""
    out = []
    for u in v.uses:
        op = pat.op_of(u.owner)
        if op.name in _VIEWS and not list(op.results[0].uses):
            continue
        if not any(op == o for o in out):
            out.append(op)
    return out


def _expanded_chain(chain: list, view: ir.Operation) -> list | None:
    """`chain` computing over the loops `view` splits its result into, `view` gone: the new product;
    None (and nothing changed) where a loop it splits is not parallel or an op cannot be rewritten."""
    shape = ir.RankedTensorType(view.results[0].type).shape
    split = {j: [shape[i] for i in g] for j, g in enumerate(reassociation_groups(view)) if len(g) > 1}
    out_dims = _loop_dims(pat.indexing_maps(chain[0])[-1])
    its = pat.iterator_types(chain[0])
    if (not split or out_dims is None or not ir.RankedTensorType(view.results[0].type).has_static_shape
            or any(its[out_dims[j]] != "parallel" for j in split)
            or not all(_can_split(op, split if i else {out_dims[j]: n for j, n in split.items()})
                       for i, op in enumerate(chain))):
        return None
    for op in chain:
        _erase_unread_views(op)  # they would keep the old op
    new, made = [], None
    for i, op in enumerate(chain):
        done = split_loops(op, split if i else {out_dims[j]: n for j, n in split.items()})
        new.append(done[0])
        made = done[1]
        for i, x in enumerate(list(done[0].operands)):
            v = None if isinstance(x.owner, ir.Block) else pat.op_of(x.owner)
            src = None if v is None or v.name != "tensor.expand_shape" else v.operands[0].owner
            if src is None or isinstance(src, ir.Block) or not pat.is_generic(pat.op_of(src)):
                continue
            fill = _constant_fill(v)
            if fill is not None:  # the accumulator's zeros: a fill of the split shape
                with ir.InsertionPoint(done[0]), done[0].location:
                    done[0].operands[i] = _fill_of(fill, ir.RankedTensorType(x.type))
                _erase_unread([v])
            elif pat.is_data_movement(pat.op_of(src)):  # a weight's transpose: the view moves before it
                _bubble(v)
    _swap(made[0], view)  # the view undoes the collapse split_loops left
    return new[0]


def _elementwise_over(op: ir.Operation, v: ir.Value) -> bool:
    """An all-parallel generic of one result reading `v` (only) at its own index."""
    if not pat.is_generic(op) or not pat.is_pointwise(op) or len(op.results) != 1:
        return False
    maps = pat.indexing_maps(op)
    ins = pat.inputs(op)
    reads = [i for i, x in enumerate(ins) if x == v]
    if len(reads) != 1 or maps[-1] != ir.AffineMap.get_identity(maps[-1].n_dims) or maps[reads[0]] != maps[-1]:
        return False
    if pat.outputs(op)[0] == v:
        return False
    return all(_loop_dims(m) is not None for m in maps)


def _slice_box(op: ir.Operation) -> tuple[list[int], list[int]] | None:
    """(offsets, sizes) of a static unit-stride extract_slice, which may drop unit dims (Bloom's
    `qkv.view(b, t, h, 3, d)[..., 0, :]`)."""
    if op.name != "tensor.extract_slice" or len(op.operands) != 1:
        return None
    offs = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
    sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
    strides = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
    if any(st != 1 for st in strides) or any(v < 0 for v in offs + sizes):
        return None  # strided, or dynamic markers
    return offs, sizes


def _dropping_units(v: ir.Value, t: ir.RankedTensorType) -> ir.Value:
    """`v` collapsed to `t` where a rank-reducing slice dropped unit dims (each joins the kept dim
    after it, or the last one)."""
    src = list(ir.RankedTensorType(v.type).shape)
    if len(src) == t.rank:
        return v
    groups, pending, j = [], [], 0
    for i, n in enumerate(src):
        keep = j < t.rank and n == t.shape[j] and len(src) - i >= t.rank - j and (n != 1 or len(src) - i == t.rank - j)
        pending.append(i)
        if keep:
            groups.append(pending)
            pending, j = [], j + 1
    if pending:
        groups[-1] += pending
    return tensor.CollapseShapeOp(t, v, reassociation_attr(groups)).result


def _boxes(value: ir.Value, out_map: ir.AffineMap, n_loops: int):
    """Per slice of `value`: (slice op, loop offsets, loop sizes), or None when the slices are
    not disjoint boxes of the loops."""
    out_dims = _loop_dims(out_map)
    if out_dims is None:
        return None
    boxes = []
    for s in _readers(value):
        box = _slice_box(s)
        if box is None:
            return None
        offs, sizes = [0] * n_loops, [None] * n_loops
        for j, d in enumerate(out_dims):
            offs[d], sizes[d] = box[0][j], box[1][j]
        boxes.append((s, offs, sizes))
    for i, (_, o1, s1) in enumerate(boxes):
        for _, o2, s2 in boxes[:i]:
            if all(s1[d] is None or (o1[d] < o2[d] + s2[d] and o2[d] < o1[d] + s1[d]) for d in range(n_loops)):
                return None  # overlapping boxes: a split would compute their common part twice
    return boxes


def _split(product: ir.Operation) -> bool:
    if len(product.results) != 1 or not ir.RankedTensorType(product.results[0].type).has_static_shape:
        return False
    changed = False
    while True:
        found = _chain(product)
        if found is None:
            return changed
        chain, view = found
        if view is None:
            break
        product = _expanded_chain(chain, view)
        if product is None:
            return changed
        changed = True
    return _split_chain(chain) or changed


def _split_chain(chain: list) -> bool:
    product = chain[0]
    last = chain[-1]
    sizes = pat.loop_sizes(product)
    if any(not isinstance(s, int) for s in sizes):
        return False
    out_dims = _loop_dims(pat.indexing_maps(product)[-1])
    if out_dims is None:
        return False
    # the chain's ops share the product's result dims; boxes over the product's loops
    boxes = _boxes(last.results[0], _as_product_map(out_dims, len(sizes)), len(sizes))
    if not boxes or any(_indexes(op) for op in chain):
        return False
    sliced = {d for _, offs, szs in boxes for d in range(len(sizes))
              if szs[d] is not None and szs[d] != sizes[d]}
    if not sliced or not _worth_it(product, boxes, sliced, sizes):
        return False
    if any(_returned_as_eagers_view(s.results[0]) for s, _, _ in boxes):
        return False  # returned as eager's view of the whole output (passes/returned_views.py)
    if len(boxes) > 1 and _rejoined(boxes):
        return False
    for s, offs, szs in boxes:
        full = [sizes[d] if szs[d] is None else szs[d] for d in range(len(sizes))]
        offs = [o if szs[d] is not None else 0 for d, o in enumerate(offs)]
        with ir.InsertionPoint(s), s.location:
            made = [_sliced_op(product, offs, full)]
            for before, op in zip(chain, chain[1:]):  # their loops are the product's result dims
                made.append(_sliced_op(op, [offs[d] for d in out_dims], [full[d] for d in out_dims],
                                       replace=(before.results[0], made[-1].results[0])))
        with ir.InsertionPoint(s), s.location:
            part = _dropping_units(made[-1].results[0], ir.RankedTensorType(s.results[0].type))
        s.results[0].replace_all_uses_with(part)
        s.erase()
        views = [pat.op_of(u.owner) for u in made[-1].results[0].uses]
        if len(views) == 1 and views[0].name == "tensor.expand_shape":
            # a part viewed as heads computes over the split loops, as the whole product did when
            # the view followed it: its transpose to (batch, heads, tokens, dim) becomes its epilogue
            _expanded_chain(made, views[0])
    feeds = [o.owner for op in chain for o in op.operands
             if not isinstance(o.owner, ir.Block) and not any(pat.op_of(o.owner) == c for c in chain)]
    for op in reversed(chain):
        _erase_unread_views(op)
        if not list(op.results[0].uses):
            op.erase()
    _erase_unread(feeds)
    return True


def _erase_unread_views(op: ir.Operation) -> None:
    """Views of `op`'s result that nothing reads (leftovers of earlier rewrites)."""
    for u in list(op.results[0].uses):
        r = pat.op_of(u.owner)
        if r.name in _VIEWS and not list(r.results[0].uses):
            r.erase()


def _erase_unread(ops: list) -> None:
    """The whole product's accumulator and weight transpose, if nothing reads them any more."""
    erased: set = set()
    while ops:
        op = pat.op_of(ops.pop())
        if op in erased:
            continue
        if len(op.results) == 1 and not list(op.results[0].uses) and (op.name in _VIEWS or (
                pat.is_generic(op) and (pat.is_fill(op) or pat.is_data_movement(op)))):
            ops += [o.owner for o in op.operands if not isinstance(o.owner, ir.Block)]
            erased.add(op)
            op.erase()


def _as_product_map(out_dims: list[int], n: int) -> ir.AffineMap:
    """The chain's last op indexes the product's result dims in order: as a map of the product's
    loops, the product's own output map."""
    return ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(d) for d in out_dims])


def _indexes(op: ir.Operation) -> bool:
    """Whether the body reads its loop indices (an iota, a gather): they would shift in a slice."""
    return any(o.name == "linalg.index" for o in pat.body_ops(op))


def _worth_it(product: ir.Operation, boxes, sliced: set, sizes: list) -> bool:
    if len(boxes) == 1:
        return True  # one box: less of everything
    maps = pat.indexing_maps(product)
    ins = pat.inputs(product)
    shared = [i for i, m in enumerate(maps[:len(ins)]) if not sliced & set(_loop_dims(m) or ())]
    if not shared:
        return True
    if shared == [0] and _gated(boxes):
        return True  # a gated MLP's gate and up halves: one kernel at any width (fuse_siblings)
    if shared == [0]:  # the input rows: read once per kernel of the products reading them
        extra = (_kernels(product, boxes) - _kernels(product, None)) * _elements(ins[0])
    else:
        extra = (len(boxes) - 1) * sum(_elements(ins[i]) for i in shared)
    return extra <= 0 or _moved_outweigh(boxes, extra)


_REACH = 4  # elementwise steps from a half to the multiplication that gates it


def _gated(boxes) -> bool:
    """Two equal halves that meet in one multiplication a few elementwise steps on: act(gate) * up,
    which passes/fuse_siblings.py `_merge_gated` computes in one kernel whatever the width."""
    if len(boxes) != 2 or boxes[0][2] != boxes[1][2]:
        return False
    ahead = []
    for s, _, _ in boxes:
        seen, frontier = [], [s.results[0]]
        for _ in range(_REACH):
            nxt = []
            for v in frontier:
                for u in v.uses:
                    op = pat.op_of(u.owner)
                    if (op.name in _VIEWS or (pat.is_generic(op) and pat.is_pointwise(op))) and op not in seen:
                        seen.append(op)
                        nxt.extend(op.results)
            frontier = nxt
        ahead.append(seen)
    return any(op in ahead[1] and pat.is_generic(op) and any(o.name == "arith.mulf" for o in pat.body_ops(op))
               for op in ahead[0])


def _kernels(product: ir.Operation, boxes) -> int:
    """How many kernels read `product`'s first factor once the products reading it are merged as
    siblings (passes/fuse_siblings.py: equal loops, at most MAX_SIBLINGS, each at most
    MAX_SIBLING_N columns); with `boxes`, after `product` is split into them."""
    x = product.operands[0]
    shapes = []
    for u in x.uses:
        c = pat.op_of(u.owner)
        if u.operand_number != 0 or not pat.is_generic(c) or not pat.is_contraction(c):
            continue
        if c == product and boxes is not None:
            full = pat.loop_sizes(c)
            shapes += [[full[d] if szs[d] is None else szs[d] for d in range(len(full))] for _, _, szs in boxes]
        else:
            shapes.append(list(pat.loop_sizes(c)))
    counts: dict = {}
    for i, sz in enumerate(shapes):
        x_dims = set(_loop_dims(pat.indexing_maps(product)[0]) or ())
        cols = 1
        for d, n in enumerate(sz):
            if d not in x_dims and pat.iterator_types(product)[d] == "parallel":
                cols *= n
        key = tuple(sz) if cols <= MAX_SIBLING_N else ("alone", i)
        counts[key] = counts.get(key, 0) + 1
    return sum(-(-n // MAX_SIBLINGS) for n in counts.values())


def _elements(v: ir.Value) -> int:
    return math.prod(ir.RankedTensorType(v.type).shape)


def _moved_outweigh(boxes, extra: int) -> bool:
    """Parts that a transpose copies out of the whole product (into a cache's layout, or for
    RoPE's pieces, where no contraction takes the transpose into its indexing) need a kernel of
    their own, which a product per part saves by writing them transposed from its epilogue: split
    when those, written and read, outweigh the `extra` elements read."""
    moved = sum(_elements(s.results[0]) for s, _, _ in boxes if _moved(s.results[0]))
    return moved > 0 and 2 * moved >= extra


_VIEWS = ("tensor.expand_shape", "tensor.collapse_shape", "tensor.extract_slice")


def _moved(v: ir.Value) -> bool:
    """Whether a transpose reads `v` (through views) whose result a kernel has to write."""
    frontier = [v]
    while frontier:
        for u in frontier.pop().uses:
            op = pat.op_of(u.owner)
            if op.name in _VIEWS:
                frontier.extend(op.results)
            elif (pat.is_generic(op) and pat.is_permutation_movement(op)
                  and not _taken_by_contractions(op.results[0])):
                return True
    return False


def _taken_by_contractions(v: ir.Value) -> bool:
    """Read only (through views) as an input of contractions, which fold a transpose into their
    indexing."""
    for u in v.uses:
        op = pat.op_of(u.owner)
        if op.name in _VIEWS:
            if not _taken_by_contractions(op.results[0]):
                return False
        elif not (pat.is_generic(op) and pat.is_contraction(op) and u.operand_number < pat.num_inputs(op)):
            return False
    return True


def _rejoined(boxes) -> bool:
    """Whether two parts meet again in one concatenation (a rotary embedding's rotated and passed
    dims of one head): the whole product already holds them together."""
    seen: dict = {}
    for i, (s, _, _) in enumerate(boxes):
        frontier, mine = [s.results[0]], set()
        while frontier:
            for u in frontier.pop().uses:
                op = pat.op_of(u.owner)
                if op in mine:
                    continue
                mine.add(op)
                if op.name == "tensor.concat":
                    if seen.get(op, i) != i:
                        return True
                    seen[op] = i
                if op.name in _VIEWS or op.name == "tensor.concat" or (pat.is_generic(op) and pat.is_pointwise(op)):
                    frontier.extend(op.results)
    return False


def _returned_as_eagers_view(v: ir.Value) -> bool:
    """Whether `v` reaches a result of @main only moved (views, transposes), where eager returns
    that result as a view (not contiguous). passes/returned_views.py returns it as a view of the
    whole product, with eager's strides and storage shared with the other parts; parts computed
    apart could not be."""
    func = v.owner.parent
    while func is not None and pat.op_of(func).name != "func.func":
        func = func.parent
    if func is None or LAYOUTS not in pat.op_of(func).attributes:
        return False
    layouts = [list(ir.DenseI64ArrayAttr(a)) for a in ir.ArrayAttr(pat.op_of(func).attributes[LAYOUTS])]
    frontier = [v]
    while frontier:
        for u in frontier.pop().uses:
            op = pat.op_of(u.owner)
            if op.name == "func.return":
                shape = ir.RankedTensorType(op.operands[u.operand_number].type).shape
                lay = layouts[u.operand_number] if u.operand_number < len(layouts) else []
                if len(lay) == len(shape) + 1 and any(
                        n != 1 and st != c for n, st, c in zip(shape, lay, contiguous_strides(shape))):
                    return True
            elif op.name in _VIEWS or op.name == "linalg.transpose" or (
                    pat.is_generic(op) and pat.is_data_movement(op)):
                frontier.extend(op.results)
    return False


def _sliced_op(op: ir.Operation, offs: list[int], sizes: list[int], replace=None) -> ir.Operation:
    """A clone of generic `op` computing the loop box (offs, sizes) (None offset: the whole
    loop), its operands sliced to match; `replace` = (old operand, new value already the box)."""
    maps = pat.indexing_maps(op)
    operands = []
    for i, x in enumerate(list(pat.inputs(op)) + list(pat.outputs(op))):
        if replace is not None and x == replace[0]:
            operands.append(replace[1])
            continue
        operands.append(_slice_value(x, maps[i], offs, sizes, op) if isinstance(x.type, ir.RankedTensorType) else x)
    new = pat.op_of(op.clone())
    for i, x in enumerate(operands):
        new.operands[i] = x
    out = _loop_dims(maps[-1])
    t = ir.RankedTensorType(op.results[0].type)
    new.results[0].set_type(ir.RankedTensorType.get([sizes[d] for d in out], t.element_type))
    return new


def _slice_value(x: ir.Value, m: ir.AffineMap, offs: list[int], sizes: list[int], reader) -> ir.Value:
    """`x`, read through map `m`, restricted to the loop box: itself where the box takes all of it;
    a new empty or fill where it is one; else an extract_slice (a view)."""
    t = ir.RankedTensorType(x.type)
    dims = _loop_dims(m)
    x_offs, x_sizes = [], []
    for j, e in enumerate(m.results):
        if isinstance(e, ir.AffineDimExpr):
            x_offs.append(offs[e.position])
            x_sizes.append(sizes[e.position])
        else:
            x_offs.append(0)
            x_sizes.append(t.shape[j])
    if x_offs == [0] * t.rank and x_sizes == list(t.shape):
        return x
    owner = None if isinstance(x.owner, ir.Block) else pat.op_of(x.owner)
    if owner is not None and owner.name == "tensor.empty":
        return tensor.EmptyOp(x_sizes, t.element_type).result
    fill = _constant_fill(owner)
    if fill is not None:  # the accumulator's zeros (canonicalisation may have reshaped them)
        return _fill_of(fill, ir.RankedTensorType.get(x_sizes, t.element_type))
    if (owner is not None and pat.is_generic(owner) and len(owner.results) == 1 and dims is not None
            and pat.is_data_movement(owner) and not _indexes(owner)
            and pat.indexing_maps(owner)[-1] == ir.AffineMap.get_identity(t.rank)):
        return _sliced_op(owner, x_offs, x_sizes).results[0]  # a weight's transpose: of the part's rows
    return tensor.ExtractSliceOp(ir.RankedTensorType.get(x_sizes, t.element_type), x, [], [], [],
                                 x_offs, x_sizes, [1] * t.rank).result


def _constant_fill(op):
    """The constant fill `op` is, or reshapes."""
    while op is not None and op.name in ("tensor.expand_shape", "tensor.collapse_shape"):
        v = op.operands[0]
        op = None if isinstance(v.owner, ir.Block) else pat.op_of(v.owner)
    return op if op is not None and pat.is_generic(op) and _is_constant_fill(op) else None


def _fill_of(fill: ir.Operation, t: ir.RankedTensorType) -> ir.Value:
    """A fill of type `t` with `fill`'s scalar."""
    return refill(fill, tensor.EmptyOp(list(t.shape), t.element_type).result).results[0]
