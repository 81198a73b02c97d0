"""Moves views off the values fusion wants to fold, part of `uniorch-preprocess` (docs/kernels.md §1).

Fusion folds a constant fill into a contraction's accumulator and a transpose into its consumer's
indexing, but only when the two ops meet directly. Two shapes of IR hide the pair behind a view,
and each rewrite here puts the fill or transpose on the other side of it:

- `reshape(fill(empty))` → `fill(empty')`: canonicalisation leaves matmul accumulators as a fill
  of the 2-D matmul shape reshaped to the batched one; with symbolic sizes the new empty takes
  the reshape's sizes as expressions over @main's arguments (a static batch and a symbolic
  length left a gated MLP's accumulators outside its chain kernel, which then refused to compile);
- `extract_slice(transpose(x))` → `transpose(extract_slice(x))`: attention's q/k/v permute the
  fused qkv projection and then slice it; each slice becomes a small transpose of a strided view,
  which joins the kernel reading it instead of materialising the whole permuted tensor;
- `collapse_shape(transpose(x))` dropping size-1 dims → one transpose to the collapsed shape:
  contraction kernels take transposed operands but no views (attention's `v` slice);
- `transpose(expand_shape(x))` adding size-1 dims → a transpose reading `x`: the expansion is
  only a change of indexing, and hiding `x`'s producer behind it keeps that producer out of the
  kernel (nn.MultiheadAttention(batch_first=True) unsqueezes and permutes the normalised input
  before its in-projection, which left LayerNorm a kernel writing the activation).
"""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import tensor

from uniorch.codegen import patterns as pat
from uniorch.errors import LoweringError
from uniorch.ir.dims import UnknownSize

from .ir_utils import iterator_types_attr, size_as_index

RESHAPES = ("tensor.expand_shape", "tensor.collapse_shape")


def rewrite_views(func_op: ir.Operation) -> None:
    block = func_op.regions[0].blocks[0]
    for op in [o.operation for o in block.operations]:
        if op.name in RESHAPES:
            _fill_through_reshape(op)
    for op in [o.operation for o in block.operations]:
        if pat.is_generic(op):
            _transpose_after_slice(op)
    for op in [o.operation for o in block.operations]:
        if op.name == "tensor.collapse_shape":
            _transpose_through_collapse(op)
    for op in [o.operation for o in block.operations]:
        if pat.is_generic(op):
            _transpose_of_unit_expand(op)


def _owner(v: ir.Value):
    return None if isinstance(v.owner, ir.Block) else pat.op_of(v.owner)


def _empty_like(t: ir.RankedTensorType, like: ir.Value = None, at: ir.Operation = None) -> ir.Value:
    """An empty tensor of type `t`; its symbolic sizes those of `like`, built from @main's arguments
    (`at` is an op of @main). Raises dims.UnknownSize where a size has no such expression."""
    if t.has_static_shape:
        return tensor.EmptyOp(list(t.shape), t.element_type).result
    from uniorch.ir import dims

    sizes = dims.shape(like)  # symbolic sizes as expressions over @main's (uniorch/ir/dims.py)
    func_op = at.parent
    return tensor.EmptyOp([n if isinstance(n, int) else size_as_index(n, func_op) for n in sizes],
                          t.element_type).result


def _is_constant_fill(op) -> bool:
    """A fill whose every element is the same scalar (no iota: its values depend on the shape)."""
    if op is None or not pat.is_fill(op) or len(op.results) != 1 or pat.body_ops(op):
        return False
    if any(isinstance(v.type, ir.ShapedType) for v in pat.inputs(op)):
        return False
    return all(len(m.results) == 0 for m in pat.indexing_maps(op)[:-1])


def _fill_through_reshape(view: ir.Operation) -> None:
    fill = _owner(view.operands[0])
    if not _is_constant_fill(fill):
        return
    t = ir.RankedTensorType(view.results[0].type)
    with ir.InsertionPoint(view), view.location:
        try:  # symbolic sizes: the view's own, as expressions over @main's arguments
            empty = _empty_like(t, view.results[0], view)
        except UnknownSize:
            return
        new = refill(fill, empty)
    view.results[0].replace_all_uses_with(new.results[0])
    view.erase()
    if not list(fill.results[0].uses):
        fill.erase()


def refill(fill: ir.Operation, empty: ir.Value) -> ir.Operation:
    """Constant fill `fill` cloned at the insertion point to fill `empty` (another shape)."""
    n = ir.RankedTensorType(empty.type).rank
    new = pat.op_of(fill.clone())
    new.operands[pat.num_inputs(new)] = empty
    new.results[0].set_type(empty.type)
    maps = [ir.AffineMap.get(n, 0, []) for _ in pat.inputs(new)] + [ir.AffineMap.get_identity(n)]
    new.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps])
    new.attributes["iterator_types"] = iterator_types_attr(["parallel"] * n)
    return new


def _static_slice(op: ir.Operation) -> tuple[list[int], list[int]] | None:
    """(offsets, sizes) of a static, unit-stride, rank-preserving extract_slice."""
    if op.name != "tensor.extract_slice" or len(op.operands) != 1:
        return None
    offs = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
    sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
    strides = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
    if any(s != 1 for s in strides) or ir.RankedTensorType(op.results[0].type).rank != len(sizes):
        return None
    if any(v < 0 for v in offs + sizes):  # dynamic markers
        return None
    return offs, sizes


def _transpose_after_slice(t: ir.Operation) -> None:
    if len(t.results) != 1 or not pat.is_permutation_movement(t):
        return
    m_in, m_out = pat.indexing_maps(t)
    if m_out != ir.AffineMap.get_identity(m_out.n_dims):
        return
    uses = [pat.op_of(u.owner) for u in t.results[0].uses]
    slices = [(u, _static_slice(u)) for u in uses]
    if not uses or any(s is None for _, s in slices):
        return
    src = pat.inputs(t)[0]
    for s, (offs, sizes) in slices:
        x_offs, x_sizes = [], []
        for e in m_in.results:
            if isinstance(e, ir.AffineDimExpr):
                x_offs.append(offs[e.position])
                x_sizes.append(sizes[e.position])
            else:  # constant 0: a unit dim of the source
                x_offs.append(0)
                x_sizes.append(1)
        out_t = ir.RankedTensorType(s.results[0].type)
        with ir.InsertionPoint(s), s.location:
            xs = pat.op_of(s.clone())
            xs.operands[0] = src
            xs.attributes["static_offsets"] = ir.DenseI64ArrayAttr.get(x_offs)
            xs.attributes["static_sizes"] = ir.DenseI64ArrayAttr.get(x_sizes)
            xs.results[0].set_type(ir.RankedTensorType.get(x_sizes, out_t.element_type))
            empty = _empty_like(out_t)
            nt = pat.op_of(t.clone())
        nt.operands[0] = xs.results[0]
        nt.operands[1] = empty
        nt.results[0].set_type(out_t)
        s.results[0].replace_all_uses_with(nt.results[0])
        s.erase()
    t.erase()


def _transpose_through_collapse(view: ir.Operation) -> None:
    t = _owner(view.operands[0])
    if t is None or len(t.results) != 1 or not pat.is_permutation_movement(t):
        return
    if len(list(t.results[0].uses)) != 1:
        return
    m_in, m_out = pat.indexing_maps(t)
    if m_out != ir.AffineMap.get_identity(m_out.n_dims):
        return
    sizes = pat.loop_sizes(t)
    keep = []  # per collapsed dim, the loop dim that carries it; the others are size 1
    for group in ir.ArrayAttr(view.attributes["reassociation"]):
        dims = [ir.IntegerAttr(d).value for d in ir.ArrayAttr(group)]
        big = [d for d in dims if sizes[d] != 1]
        if len(big) > 1:
            return  # a real reshape, not a unit-dim drop
        keep.append(big[0] if big else dims[0])
    renum = {d: i for i, d in enumerate(keep)}
    exprs = []
    for e in m_in.results:
        if isinstance(e, ir.AffineDimExpr) and e.position in renum:
            exprs.append(ir.AffineDimExpr.get(renum[e.position]))
        else:
            exprs.append(ir.AffineConstantExpr.get(0))
    out_t = ir.RankedTensorType(view.results[0].type)
    n = out_t.rank
    with ir.InsertionPoint(view), view.location:
        try:  # a symbolic size (a sequence length) from @main's arguments
            empty = _empty_like(out_t, view.results[0], view)
        except (UnknownSize, LoweringError):
            return
        nt = pat.op_of(t.clone())
    nt.operands[1] = empty
    nt.results[0].set_type(out_t)
    maps = [ir.AffineMap.get(n, 0, exprs), ir.AffineMap.get_identity(n)]
    nt.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps])
    nt.attributes["iterator_types"] = iterator_types_attr(["parallel"] * n)
    view.results[0].replace_all_uses_with(nt.results[0])
    view.erase()
    t.erase()


def _transpose_of_unit_expand(t: ir.Operation) -> None:
    if len(t.results) != 1 or not pat.is_permutation_movement(t):
        return
    view = _owner(pat.inputs(t)[0])
    if view is None or view.name != "tensor.expand_shape":
        return
    src_t = ir.RankedTensorType(view.operands[0].type)
    out_t = ir.RankedTensorType(view.results[0].type)
    if not (src_t.has_static_shape and out_t.has_static_shape):
        return
    m_in, m_out = pat.indexing_maps(t)
    exprs = []
    for group in ir.ArrayAttr(view.attributes["reassociation"]):
        dims = [ir.IntegerAttr(d).value for d in ir.ArrayAttr(group)]
        big = [d for d in dims if out_t.shape[d] != 1]
        if len(big) > 1:
            return  # a real reshape, not added unit dims
        exprs.append(m_in.results[big[0]] if big else ir.AffineConstantExpr.get(0))
    n = m_in.n_dims
    maps = [ir.AffineMap.get(n, 0, exprs), m_out]
    t.operands[0] = view.operands[0]
    t.attributes["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps])
    if not list(view.results[0].uses):
        view.erase()
