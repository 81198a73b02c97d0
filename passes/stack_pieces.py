"""`torch.stack` of pointwise results → one pointwise generic picking by position, part of
`uniorch-preprocess`.

`stack((f(x), g(x)), dim=-1)` (GPT-J's interleaved rotary: `stack((x1 * cos - x2 * sin,
x1 * sin + x2 * cos), -1).flatten(-2)`) is a concatenation of unit-dim views of two computed
tensors: each piece is written by its kernel, then a copy kernel writes the stack. When every piece
is a pointwise generic read only by the stack, the stack becomes one generic over the stacked
shape that computes each piece's value as its body did and yields the one whose position along
the stacked dim is the lane's. Nothing is copied, and the stack is a pointwise op like any other
for fusion (the epilogue of what computes its inputs, or the producer of what reads it).
"""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith, linalg, tensor

from uniorch.codegen import patterns as pat

from .ir_utils import producer as _producer
from .sink_collapse import EXPAND, _groups, _reassociation, _shape
from .ir_utils import iterator_types_attr
from .split_prologue import _clone_into

MAX_PIECES = 4  # each lane computes every piece: a stack of a few


def stacks_as_selects(func_op: ir.Operation) -> int:
    done = 0
    block = func_op.regions[0].blocks[0]
    for op in [o.operation for o in block.operations]:
        if op.name == "tensor.concat" and _rewrite(op):
            done += 1
    return done


def _piece(v: ir.Value, dim: int, cat: ir.Operation):
    """(pointwise generic, unit view or None) for a piece: the generic's result viewed with a unit
    dim inserted at `dim` (a stack), or the result itself (a concatenation of equal pieces, as
    torch decomposes a stack along an inner dim); else None."""
    if any(pat.op_of(u.owner) != cat for u in v.uses):
        return None
    e = _producer(v)
    if e is not None and e.name == EXPAND:
        shape = _shape(v)
        src = e.operands[0]
        if shape[dim] != 1 or _shape(src) != shape[:dim] + shape[dim + 1:]:
            return None
        if not any(dim in g and len(g) == 2 for g in _groups(e)):
            return None
        if any(pat.op_of(u.owner) != e for u in src.uses):
            return None
    else:
        src, e = v, None
    g = _producer(src)
    if g is None or not pat.is_generic(g) or not pat.is_pointwise(g) or len(g.results) != 1:
        return None
    n = len(pat.iterator_types(g))
    if pat.indexing_maps(g)[-1] != ir.AffineMap.get_identity(n):
        return None
    if any(o.name == "linalg.index" for o in pat.body_ops(g)):
        return None
    outs_args = list(pat.body(g).arguments)[pat.num_inputs(g):]
    if any(u for a in outs_args for u in a.uses):
        return None
    return g, e


def _lift(m: ir.AffineMap, dim: int, n: int) -> ir.AffineMap:
    """m over the piece's dims, over the stack's (a new loop dim at `dim`)."""
    sub = ir.AffineMap.get(n + 1, 0, [ir.AffineDimExpr.get(d if d < dim else d + 1) for d in range(n)])
    return ir.AffineMap.get(n + 1, 0, [e.compose(sub) for e in m.results])


def _rewrite(cat: ir.Operation) -> bool:
    t = ir.RankedTensorType(cat.results[0].type)
    if not t.has_static_shape:
        return False
    dim = ir.IntegerAttr(cat.attributes["dim"]).value
    found = [_piece(v, dim, cat) for v in cat.operands]
    if len(found) < 2 or len(found) > MAX_PIECES or any(p is None for p in found):
        return False
    pieces, views = [p for p, _ in found], [e for _, e in found]
    if any(p == q for i, p in enumerate(pieces) for q in pieces[:i]):
        return False  # one value twice (Llama's cat((freqs, freqs))): not pieces of their own
    if len({str(p.results[0].type) for p in pieces}) != 1 or len({e is None for e in views}) != 1:
        return False
    n = len(pat.iterator_types(pieces[0]))
    stacked = list(t.shape)  # the stack's own shape: a new dim of the pieces' count at `dim`
    if views[0] is None:  # equal pieces side by side: (.., count, piece size, ..), collapsed after
        stacked[dim:dim + 1] = [len(pieces), _shape(pieces[0].results[0])[dim]]
    with cat.location:
        st = ir.RankedTensorType.get(stacked, t.element_type)
    ins, maps, types, slot = [], [], [], []  # slot: per piece, its inputs' positions (shared reads once)
    for p in pieces:
        where = []
        for v, m, a in zip(pat.inputs(p), pat.indexing_maps(p), pat.body(p).arguments):
            lifted = _lift(m, dim, n)
            at = next((i for i, (w, lm) in enumerate(zip(ins, maps)) if w == v and lm == lifted), None)
            if at is None:
                at = len(ins)
                ins.append(v)
                maps.append(lifted)
                types.append(a.type)
            where.append(at)
        slot.append(where)
    maps.append(ir.AffineMap.get_identity(n + 1))
    et = t.element_type
    with ir.InsertionPoint(cat), cat.location:
        empty = tensor.EmptyOp(stacked, et).result
        new = ir.Operation.create(
            "linalg.generic", results=[st], operands=ins + [empty],
            attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                        "iterator_types": iterator_types_attr(["parallel"] * (n + 1)),
                        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(ins), 1])},
            regions=1)
        nb = new.regions[0].blocks.append(*types, et, arg_locs=[cat.location] * (len(types) + 1))
        with ir.InsertionPoint(nb):
            values = []
            for p, where in zip(pieces, slot):
                args = list(pat.body(p).arguments)[:pat.num_inputs(p)]
                mapping = {a: nb.arguments[i] for a, i in zip(args, where)}
                _clone_into(list(pat.body_ops(p)), mapping)
                y = pat.yield_op(p).operands[0]
                values.append(mapping.get(y, y))
            pos = linalg.IndexOp(dim).result
            value = values[-1]
            for i in range(len(values) - 2, -1, -1):
                at = arith.CmpIOp(arith.CmpIPredicate.eq, pos, arith.ConstantOp(ir.IndexType.get(), i).result).result
                value = arith.SelectOp(at, values[i], value).result
            linalg.YieldOp([value])
    result = new.results[0]
    if views[0] is None:
        with ir.InsertionPoint(cat), cat.location:
            groups = [[i] for i in range(dim)] + [[dim, dim + 1]] + [[i + 1] for i in range(dim + 1, t.rank)]
            result = tensor.CollapseShapeOp(t, result, _reassociation(groups)).result
    cat.results[0].replace_all_uses_with(result)
    cat.erase()
    for e, p in zip(views, pieces):
        if e is not None:
            e.erase()
        p.erase()
    return True
