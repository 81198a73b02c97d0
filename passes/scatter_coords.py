"""A scatter's coordinates are computed in one kernel that writes them, part of `uniorch-preprocess`.

torch-mlir lowers `scatter`/`scatter_add`/`index_put` to `tm_tensor.scatter`, whose indices are an
`[N, depth]` tensor assembled from columns: one generic computes each coordinate as an `[N, 1]`
result, a fill makes `[N, depth]`, and one `insert_slice` per column copies it in. Each of those is
a kernel: the columns are written, the fill is written, and every insert_slice reads and writes the
whole coordinate tensor once more. Here the assembly becomes one generic over `[N, depth]` that
computes each column as the original body did and picks the column's value by position, so the
coordinates are written once, by one kernel, and the column results lose their readers.
"""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith, linalg, tensor

from uniorch.codegen import patterns as pat
from uniorch.ir import dims

from .ir_utils import iterator_types_attr, size_as_index
from .ir_utils import producer as _producer
from .split_prologue import _clone_into


def assemble_scatter_coords(func_op: ir.Operation) -> int:
    done = 0
    block = func_op.regions[0].blocks[0]
    for op in [o.operation for o in block.operations]:
        if op.name == "tm_tensor.scatter" and _rewrite(op):
            done += 1
    return done


def _columns(v: ir.Value):
    """(fill value, {column: (generic, result index)}) when v is a fill of [N, depth] with [N, 1]
    columns inserted, each a result of one pointwise generic over N; else None."""
    cols: dict = {}
    insert_ops = []
    while True:
        p = _producer(v)
        if p is None or p.name != "tensor.insert_slice":
            break
        offs = list(ir.DenseI64ArrayAttr(p.attributes["static_offsets"]))
        sizes = list(ir.DenseI64ArrayAttr(p.attributes["static_sizes"]))
        strides = list(ir.DenseI64ArrayAttr(p.attributes["static_strides"]))
        if len(offs) != 2 or offs[0] != 0 or sizes[1] != 1 or strides != [1, 1] or offs[1] in cols:
            return None
        if not _all_rows(p, sizes[0], v):
            return None
        src = p.operands[0]
        g = _producer(src)
        if g is None or not pat.is_generic(g) or not pat.is_pointwise(g) or len(pat.iterator_types(g)) != 1:
            return None
        if list(ir.RankedTensorType(src.type).shape)[1:] != [1]:
            return None
        cols[offs[1]] = (g, list(g.results).index(src) if src in list(g.results) else None)
        if cols[offs[1]][1] is None:
            return None
        insert_ops.append(p)
        v = p.operands[1]
    fill = _producer(v)
    if not cols or fill is None or not pat.is_fill(fill):
        return None
    if any(len(list(p.results[0].uses)) != 1 for p in insert_ops[1:]):
        return None  # an intermediate assembly read elsewhere
    first = next(iter(cols.values()))[0]
    if any(g != first for g, _ in cols.values()):
        return None  # columns from several generics: not this lowering
    fv = pat.inputs(fill)[0] if pat.inputs(fill) else None
    if fv is None or isinstance(fv.type, ir.ShapedType):
        return None
    return fv, cols


def _all_rows(insert: ir.Operation, rows: int, dest: ir.Value) -> bool:
    """Whether a column's insert_slice covers every row of `dest`: statically, or (symbolic rows: a
    sequence length) by one size operand equal to the destination's rows."""
    extra = list(insert.operands)[2:]
    if not extra:
        return rows == ir.RankedTensorType(dest.type).shape[0]
    if len(extra) != 1 or rows != ir.ShapedType.get_dynamic_size():
        return False
    try:
        return dims.index_value(extra[0]) == _rows(dest)
    except dims.UnknownSize:
        return False


def _rows(v: ir.Value):
    """The rows of a coordinate assembly: of the tensor its insert_slice chain starts from (uniorch/ir/dims.py
    derives no size for an insert_slice's result)."""
    p = _producer(v)
    while p is not None and p.name == "tensor.insert_slice":
        v = p.operands[1]
        p = _producer(v)
    return dims.shape(v)[0]


def _rewrite(scatter: ir.Operation) -> bool:
    idx = scatter.operands[1]
    t = ir.RankedTensorType(idx.type)
    if t.rank != 2 or ir.ShapedType.is_dynamic_size(t.shape[1]):
        return False
    try:
        rows = _rows(idx)
    except dims.UnknownSize:
        return False
    got = _columns(idx)
    if got is None:
        return False
    fv, cols = got
    g = next(iter(cols.values()))[0]
    if any(o.name == "linalg.index" and ir.IntegerAttr(o.attributes["dim"]).value != 0 for o in pat.body_ops(g)):
        return False
    outs_args = list(pat.body(g).arguments)[pat.num_inputs(g):]
    if any(u for a in outs_args for u in a.uses):
        return False  # the body reads its outputs' initial values
    ins = list(pat.inputs(g))
    in_maps = pat.indexing_maps(g)[:len(ins)]
    maps = []
    for m in in_maps:  # g's maps over (d0) read the same elements over (d0, d1)
        maps.append(ir.AffineMap.get(2, 0, list(m.results)))
    maps.append(ir.AffineMap.get_identity(2))
    et = t.element_type
    with ir.InsertionPoint(scatter), scatter.location:
        if isinstance(rows, int):
            empty = tensor.EmptyOp(list(t.shape), et).result
        else:  # symbolic rows, from @main's arguments
            empty = tensor.EmptyOp([size_as_index(rows, scatter.parent), t.shape[1]], et).result
        new = ir.Operation.create(
            "linalg.generic", results=[t], operands=ins + [empty],
            attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                        "iterator_types": iterator_types_attr(["parallel"] * 2),
                        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(ins), 1])},
            regions=1)
        body = pat.body(g)
        types = [a.type for a in list(body.arguments)[:len(ins)]] + [et]
        nb = new.regions[0].blocks.append(*types, arg_locs=[scatter.location] * len(types))
        with ir.InsertionPoint(nb):
            mapping = {a: nb.arguments[i] for i, a in enumerate(list(body.arguments)[:len(ins)])}
            y = pat.yield_op(g)
            _clone_into(_needed(list(pat.body_ops(g)), [y.operands[r] for _, r in cols.values()]), mapping)
            j = linalg.IndexOp(1).result
            value = _constant_of(fv, mapping, nb)
            for col, (_, r) in sorted(cols.items()):
                want = arith.ConstantOp(ir.IndexType.get(), col).result
                hit = arith.CmpIOp(arith.CmpIPredicate.eq, j, want).result
                got = mapping.get(y.operands[r], y.operands[r])
                value = arith.SelectOp(hit, got, value).result
            linalg.YieldOp([value])
    scatter.operands[1] = new.results[0]
    _erase_unread(_producer(idx))
    return True


def _erase_unread(op) -> None:
    """The old assembly: insert_slices down to the fill, each erased once nothing reads it."""
    while op is not None and op.name in ("tensor.insert_slice", "linalg.generic") and not list(op.results[0].uses):
        nxt = _producer(op.operands[1]) if op.name == "tensor.insert_slice" else None
        op.erase()
        op = nxt


def _needed(ops: list, values: list) -> list:
    """The body ops computing `values` (the other results' ops, such as the updates' loads, stay out)."""
    want = {v for v in values}
    keep = []
    for o in reversed(ops):
        if any(r in want for r in o.results):
            keep.append(o)
            want.update(o.operands)
    return keep[::-1]


def _constant_of(fv: ir.Value, mapping: dict, nb) -> ir.Value:
    """The fill's scalar inside the new body: a constant is re-made there; anything else read as is."""
    if not isinstance(fv.owner, ir.Block) and pat.op_of(fv.owner).name == "arith.constant":
        c = pat.op_of(fv.owner)
        return arith.ConstantOp(fv.type, c.attributes["value"]).result
    return fv
