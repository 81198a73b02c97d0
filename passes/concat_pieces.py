"""`concat(f(a), b)` → `select(index in a's range, f(c), c)` with `c = concat(a, b)`, part of
`uniorch-preprocess`.

Rotary embeddings build `rotate_half(q) = cat(-q2, q1)`: the negation is a kernel of its own, and
the concatenation of a computed piece must be written by a copy kernel before the kernel using it
can read it. With the pointwise op moved after the concatenation (applied where the index falls in
its piece), every piece is a tensor computed elsewhere, so the concatenation joins the kernel
that reads it as masked loads (passes/fuse.py join_as_loads) and the pointwise op fuses there too.
Only pieces that are one-input, one-result pointwise generics in the same element type, read by
nothing else, of an input read from memory (an argument or a slice of one), move: a pointwise op
of a computed value stays as its producer's epilogue.
"""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith, linalg, tensor

from uniorch.codegen import patterns as pat

from .ir_utils import iterator_types_attr
from .split_prologue import _clone_into

# inputs an op of a piece cannot be fused with where it is: read from memory, as the slices are
_SLICES = ("tensor.extract_slice", "tensor.expand_shape", "tensor.collapse_shape")


def hoist_concat_pieces(func_op: ir.Operation) -> None:
    block = func_op.regions[0].blocks[0]
    for op in [o.operation for o in block.operations]:
        if op.name == "tensor.concat":
            _hoist(op)


def _movable(piece: ir.Value, cat: ir.Operation) -> ir.Operation | None:
    """The generic computing `piece` when it is elementwise over one same-typed input, read only
    by `cat`."""
    if isinstance(piece.owner, ir.Block):
        return None
    g = pat.op_of(piece.owner)
    if not pat.is_generic(g) or not pat.is_pointwise(g) or len(g.results) != 1 or pat.num_inputs(g) != 1:
        return None
    src = pat.inputs(g)[0]
    if not isinstance(src.type, ir.RankedTensorType) or src.type != piece.type:
        return None
    if not isinstance(src.owner, ir.Block) and pat.op_of(src.owner).name not in _SLICES:
        return None  # a computed input: the op is its producer's epilogue (DenseNet's ReLU)
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(g.attributes["indexing_maps"])]
    if any(m != ir.AffineMap.get_identity(ir.RankedTensorType(piece.type).rank) for m in maps):
        return None
    if any(pat.op_of(u.owner) != cat for u in piece.uses):
        return None
    body = pat.body(g)
    if any(o.name == "linalg.index" for o in body.operations):
        return None  # its positions would be the concatenation's, not the piece's
    return g


def _hoist(cat: ir.Operation) -> None:
    out_t = ir.RankedTensorType(cat.results[0].type)
    if not out_t.has_static_shape:
        return
    dim = ir.IntegerAttr(cat.attributes["dim"]).value
    moved, srcs, off = [], [], 0
    for v in cat.operands:
        g = _movable(v, cat)
        n = ir.RankedTensorType(v.type).shape[dim]
        if g is not None:
            moved.append((g, off, off + n))
        srcs.append(v if g is None else pat.inputs(g)[0])
        off += n
    if not moved:
        return
    loc = cat.location
    with ir.InsertionPoint(cat), loc:
        new_cat = tensor.ConcatOp(out_t, dim, srcs).result
        empty = tensor.EmptyOp(list(out_t.shape), out_t.element_type).result
        ident = ir.AffineMap.get_identity(out_t.rank)
        sel = ir.Operation.create(
            "linalg.generic", results=[out_t], operands=[new_cat, empty],
            attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(ident)] * 2),
                        "iterator_types": iterator_types_attr(["parallel"] * out_t.rank),
                        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1])},
            regions=1)
    et = out_t.element_type
    nb = sel.regions[0].blocks.append(et, et, arg_locs=[loc, loc])
    index = ir.IndexType.get()
    with ir.InsertionPoint(nb), loc:
        pos = linalg.IndexOp(dim).result
        acc = nb.arguments[0]
        for g, lo, hi in moved:
            blk = pat.body(g)
            ops = [pat.op_of(o) for o in blk.operations][:-1]
            mapping = {blk.arguments[0]: nb.arguments[0]}
            _clone_into(ops, mapping)
            y = pat.yield_op(g).operands[0]
            val = mapping.get(y, y)
            conds = []
            if lo:
                conds.append(arith.CmpIOp(arith.CmpIPredicate.sge, pos, arith.ConstantOp(index, lo).result).result)
            if hi < out_t.shape[dim]:
                conds.append(arith.CmpIOp(arith.CmpIPredicate.slt, pos, arith.ConstantOp(index, hi).result).result)
            cond = conds[0]
            for c in conds[1:]:
                cond = arith.AndIOp(cond, c).result
            acc = arith.SelectOp(cond, val, acc).result
        ir.Operation.create("linalg.yield", operands=[acc])
    cat.results[0].replace_all_uses_with(sel.results[0])
    cat.erase()
    erased: list = []
    for g, _, _ in moved:
        if not any(g == e for e in erased):  # one value concatenated with itself: erased once
            g.erase()
            erased.append(g)
