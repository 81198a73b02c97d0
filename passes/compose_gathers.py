"""A gather from a computed index table or another gather reads the original tensor, part of
`uniorch-preprocess`.

torch lowers a reflect or replicate pad as two gathers, one per padded dim, each reading index
tables that generics compute from `linalg.index`:

    %rows = generic { i -> |8 - |i - 3|| }                     (index table)
    %p1   = generic { extract %x[n, c, %rows[h], w] }          (pad along H)
    %p2   = generic { extract %p1[n, c, h, %cols[w]] }         (pad along W)

Fusion can evaluate a gather where a convolution's tile needs it, but only from memory: %p2 reads
%p1, so %p1 would be written and read again. Here an `extract` from the result of such a cheap
all-parallel generic is replaced by that generic's body evaluated at the extracted position (its
`linalg.index` are the indices, its inputs are read there by extracts of their own), repeated until
every extract reads a tensor that is not cheap to recompute: `%p2` becomes one gather from %x,
with the index arithmetic inline and no table or half-padded copy left.

Cheap: index arithmetic, comparisons, selects, conversions (a 16-bit pad widens, gathers and
narrows), integer `abs`/`min`/`max` and extracts; no floating-point arithmetic on loaded values, so nothing is computed more often than
the original generic computed it, beyond the index math itself.
"""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith, tensor

from uniorch.codegen import patterns as pat
from uniorch.codegen.contraction_ir import _const_of, _dim_pos as _dim
from uniorch.codegen.domain import is_unit_view
from uniorch.ir import dims

from .split_prologue import _clone_into

CHEAP = frozenset({
    "linalg.index", "linalg.yield", "tensor.extract", "arith.constant", "arith.index_cast", "arith.index_castui",
    "arith.addi", "arith.subi", "arith.muli", "arith.divsi", "arith.divui", "arith.remsi", "arith.remui",
    "arith.floordivsi", "arith.ceildivsi", "arith.cmpi", "arith.select", "arith.maxsi", "arith.minsi",
    "arith.maxui", "arith.minui", "arith.extsi", "arith.extui", "arith.trunci", "math.absi", "arith.andi",
    "arith.ori", "arith.xori", "arith.shli", "arith.shrsi", "arith.shrui",
    # conversions: a 16-bit pad is decomposed as widen, gather, narrow
    "arith.extf", "arith.truncf", "arith.sitofp", "arith.uitofp", "arith.fptosi", "arith.fptoui", "arith.bitcast",
})
MAX_ROUNDS = 8  # a chain of gathers of gathers is short (two per padded tensor); stop anyway


def compose_gathers(func_op: ir.Operation) -> int:
    """Rewrites extracts from cheap generics in every generic of `func_op`; returns how many."""
    done = 0
    for _ in range(MAX_ROUNDS):
        changed = 0
        for op in [o.operation for o in func_op.regions[0].blocks[0].operations]:
            if op.name != "linalg.generic":
                continue
            for e in [o.operation for o in pat.body(op).operations]:
                if e.name == "tensor.extract" and _inline(e):
                    changed += 1
        done += changed
        if not changed:
            break
    return done


def _cheap_source(v) -> ir.Operation | None:
    """The generic computing `v`, when it is all-parallel, has one result written through a
    permutation of its loops, reads its inputs through projections, and its body is cheap."""
    if isinstance(v.owner, ir.Block):
        return None
    g = pat.op_of(v.owner)
    if g.name != "linalg.generic" or len(g.results) != 1 or not pat.is_pointwise(g):
        return None
    maps = pat.indexing_maps(g)
    n_in = pat.num_inputs(g)
    out = maps[n_in]
    if not out.is_permutation:
        return None
    if any(not all(_dim(e) is not None or _const_of(e) == 0 for e in m.results) for m in maps[:n_in]):
        return None
    if any(o.operation.name not in CHEAP for o in pat.body(g).operations):
        return None
    body = pat.body(g)
    if any(len(list(a.uses)) and i >= n_in for i, a in enumerate(body.arguments)):
        return None  # reads its output (an init): not a function of its inputs alone
    return g if _gather_like(g) else None


def _gather_like(g: ir.Operation) -> bool:
    """A gather, an index table (no tensor inputs), a copy moving an argument's elements, or a
    conversion of a gather (a 16-bit pad widens between its two gathers). Other cheap generics (a
    mask's conversion to bool) stay: the passes after this one read them as plain inputs, which
    fusion handles better than gathers."""
    ops = [o.operation.name for o in pat.body(g).operations]
    if "tensor.extract" in ops:
        return True
    tensors = [v for v in pat.inputs(g) if isinstance(v.type, ir.RankedTensorType)]
    if not tensors:
        return True
    if len(tensors) == 1 and ops == ["linalg.yield"] and isinstance(tensors[0].owner, ir.Block):
        return True  # a transposed or broadcast argument (MoE experts' weights transposed for grouped_mm)
    if len(tensors) == 1 and ops == ["linalg.yield"] and _gathered_only(g) \
            and _no_larger(tensors[0].type, g.results[0].type):
        # a broadcast of a computed tensor that only gathers read (NeRF's inverse-CDF sampling:
        # `gather(cdf[:, None].expand(rays, samples, bins), 2, idx)`): a gather reads memory, so
        # the copy would be written whole to be read at a few places; the source is as small or smaller
        return True
    if len(tensors) == 1 and set(ops) <= {"arith.extf", "arith.truncf", "linalg.yield"} \
            and not isinstance(tensors[0].owner, ir.Block):
        src = pat.op_of(tensors[0].owner)
        return src.name == "linalg.generic" and any(o.operation.name == "tensor.extract" for o in pat.body(src).operations)
    return False


def _gathered_only(g: ir.Operation) -> bool:
    """Every reader of g's result is an extract in a generic's body (a gather)."""
    uses = list(g.results[0].uses)
    return bool(uses) and all(u.owner.name == "tensor.extract" and u.operand_number == 0 for u in uses)


def _no_larger(src, out) -> bool:
    """Static shapes, src no more elements than out (a symbolic size is never judged smaller)."""
    src, out = ir.RankedTensorType(src), ir.RankedTensorType(out)
    return src.has_static_shape and out.has_static_shape and dims.prod(src.shape) <= dims.prod(out.shape)


def _through_unit_view(e: ir.Operation) -> bool:
    """An extract from a reshape that only adds or drops size-1 dims (an index table viewed as
    15x1) reads the reshape's source at the same non-unit positions instead."""
    v = e.operands[0]
    if isinstance(v.owner, ir.Block):
        return False
    view = pat.op_of(v.owner)
    if not is_unit_view(view):
        return False
    src = view.operands[0]
    out_shape = list(ir.RankedTensorType(v.type).shape)
    src_shape = list(ir.RankedTensorType(src.type).shape)
    if any(n < 0 for n in out_shape + src_shape):
        return False  # symbolic sizes: the passes after this one read such views themselves
    at = [i for i, n in zip(list(e.operands)[1:], out_shape) if n != 1]
    with ir.InsertionPoint(e), e.location:
        zero = arith.ConstantOp(ir.IndexType.get(), 0).result if 1 in src_shape else None
        it = iter(at)
        idx = [zero if n == 1 else next(it) for n in src_shape]
        new = tensor.ExtractOp(src, idx).result
    e.results[0].replace_all_uses_with(new)
    e.erase()
    return True


def _inline(e: ir.Operation) -> bool:
    if _through_unit_view(e):
        return True
    g = _cheap_source(e.operands[0])
    if g is None:
        return False
    maps = pat.indexing_maps(g)
    n_in = pat.num_inputs(g)
    at = list(e.operands)[1:]
    loops = [None] * len(pat.iterator_types(g))
    for j, r in enumerate(maps[n_in].results):
        loops[_dim(r)] = at[j]
    body = pat.body(g)
    ins = list(g.operands)[:n_in]
    with ir.InsertionPoint(e), e.location:
        zero = None
        mapping: dict = {}
        for i, (v, m) in enumerate(zip(ins, maps[:n_in])):
            arg = body.arguments[i]
            if not list(arg.uses):
                continue
            if not isinstance(v.type, ir.RankedTensorType):
                mapping[arg] = v  # a scalar input
                continue
            idx = []
            for r in m.results:
                d = _dim(r)
                if d is None:
                    zero = zero if zero is not None else arith.ConstantOp(ir.IndexType.get(), 0).result
                    idx.append(zero)
                else:
                    idx.append(loops[d])
            mapping[arg] = tensor.ExtractOp(v, idx).result
        ops = [o.operation for o in body.operations]
        for o in ops[:-1]:
            if o.name == "linalg.index":
                mapping[o.results[0]] = loops[ir.IntegerAttr(o.attributes["dim"]).value]
            else:
                _clone_into([o], mapping)
        result = ops[-1].operands[0]
        new = mapping.get(result, result)
    e.results[0].replace_all_uses_with(new)
    e.erase()
    return True


__all__ = ["compose_gathers"]
