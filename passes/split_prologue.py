"""Takes fused producers back out of contractions, part of `uniorch-preprocess` (docs/kernels.md §1).

Upstream elementwise fusion only sees named matmuls as closed boxes until a reshape next to one
is propagated: then the matmul becomes a `linalg.generic` and the producers of its operands fuse
into its body (`out + (x * rsqrt(ms + eps) * w) * W` for RMSNorm before a projection,
`out + silu(g) * u * W` in SwiGLU). Such a body is no contraction for the tl.dot template, and
the producer is recomputed for every output column. When one side of the product reads two or
more tensors (a whole producer kernel went in), or computes more than a constant scaling of its
one tensor (a GELU of a linear layer's output that is also returned, as a training forward saves
it), each computed side becomes its own pointwise generic again and the contraction is left as
`out + a * b`, so fusion can give the producer to its natural group (the norm's row reduction; the
gate matmul's epilogue; the first linear layer's epilogue). A side that only scales one operand
by constants, or widens it, stays in the body: splitting it would only add a kernel.
"""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import tensor

from uniorch.codegen import patterns as pat

from .ir_utils import iterator_types_attr, size_as_index


def split_prologues(func_op: ir.Operation) -> None:
    block = func_op.regions[0].blocks[0]
    for op in [o.operation for o in block.operations]:
        if pat.is_reduction(op) and not pat.is_contraction(op):
            _split(op)


def _slice(v: ir.Value, blk: ir.Block) -> tuple[list[ir.Operation], set[int]]:
    """Body ops `v` depends on (body order) and the block arguments it reads."""
    ops, args, stack = set(), set(), [v]
    while stack:
        x = stack.pop()
        if isinstance(x.owner, ir.Block):
            if x.owner == blk:
                args.add(ir.BlockArgument(x).arg_number)
            continue
        o = pat.op_of(x.owner)
        if o.parent is None or pat.op_of(o.parent) != pat.op_of(blk.owner) or o in ops:
            continue  # defined outside the body: a captured constant
        ops.add(o)
        stack.extend(o.operands)
    order = [o.operation for o in blk.operations]
    return [o for o in order if o in ops], args


def _product(op: ir.Operation):
    """(add, mul, lhs, rhs) if the body is `yield out + lhs * rhs` with `out` read only there."""
    if len(op.results) != 1 or len(pat.outputs(op)) != 1:
        return None
    blk = pat.body(op)
    out_arg = blk.arguments[pat.num_inputs(op)]
    y = pat.yield_op(op)
    add = y.operands[0].owner
    if isinstance(add, ir.Block) or pat.op_of(add).name != "arith.addf" or len(list(out_arg.uses)) != 1:
        return None
    add = pat.op_of(add)
    a0, a1 = add.operands
    prod = a1 if a0 == out_arg else a0 if a1 == out_arg else None
    if prod is None or isinstance(prod.owner, ir.Block) or pat.op_of(prod.owner).name != "arith.mulf":
        return None
    mul = pat.op_of(prod.owner)
    return add, mul, mul.operands[0], mul.operands[1]


def _bare(v: ir.Value, blk: ir.Block) -> bool:
    """A side that reads its operand as is, through an extf, or scaled by constants (SDPA)."""
    return pat._strip_extf(v, blk) is not None


def _split(op: ir.Operation) -> None:
    found = _product(op)
    if found is None:
        return
    add, mul, lhs, rhs = found
    blk = pat.body(op)
    n_in = pat.num_inputs(op)
    sides = [_slice(lhs, blk), _slice(rhs, blk)]
    (ops_l, args_l), (ops_r, args_r) = sides
    if not args_l or not args_r or args_l & args_r or any(a >= n_in for a in args_l | args_r):
        return
    for ops, _ in sides:
        if any(o.name == "linalg.index" or o.regions for o in ops):
            return
    ins = pat.inputs(op)
    tensors = [sum(isinstance(ins[a].type, ir.ShapedType) for a in args) for _, args in sides]
    if max(tensors) < 2 and _bare(lhs, blk) and _bare(rhs, blk):
        return
    maps = pat.indexing_maps(op)
    sizes = pat.loop_sizes(op)
    n = len(sizes)
    new_ins, new_maps, made = [], [], []
    with ir.InsertionPoint(op):
        for v, (ops, args) in zip((lhs, rhs), sides):
            a = sorted(args)[0]
            if _bare(v, blk) and len(args) == 1 and all(isinstance(e, ir.AffineDimExpr) for e in maps[a].results):
                new_ins.append((ins[a], (v, ops, blk.arguments[a])))
                new_maps.append(maps[a])
                continue
            p = _prologue(op, v, ops, sorted(args), maps, sizes)
            made.append(p)
            dims = _dims(maps, args)
            new_ins.append((p.results[0], None))
            new_maps.append(ir.AffineMap.get(n, 0, [ir.AffineDimExpr.get(d) for d in dims]))
        new = _contraction(op, add, mul, new_ins, new_maps + [maps[n_in]])
    if not pat.is_contraction(new):  # the sides did not split into A and B operands
        new.erase()
        for p in reversed(made):
            empty = pat.op_of(pat.outputs(p)[0].owner)
            p.erase()
            empty.erase()
        return
    op.results[0].replace_all_uses_with(new.results[0])
    op.erase()


def _dims(maps, args) -> list[int]:
    return sorted({e.position for a in args for e in maps[a].results if isinstance(e, ir.AffineDimExpr)})


def _elem(t: ir.Type) -> ir.Type:
    return ir.ShapedType(t).element_type if isinstance(t, ir.ShapedType) else t


def _prologue(op, value, ops, args, maps, sizes) -> ir.Operation:
    """A pointwise generic over the dims `args` index, computing `value` as the body did."""
    dims = _dims(maps, args)
    renum = {d: i for i, d in enumerate(dims)}

    def remap(m: ir.AffineMap) -> ir.AffineMap:
        exprs = [ir.AffineDimExpr.get(renum[e.position]) if isinstance(e, ir.AffineDimExpr) else e for e in m.results]
        return ir.AffineMap.get(len(dims), 0, exprs)

    ins = pat.inputs(op)
    et = value.type
    loc = ir.Location.fused([o.location for o in ops]) if ops else op.location
    with loc:
        # a symbolic size (a decode step's sequence length) from the function's arguments
        empty = tensor.EmptyOp([sizes[d] if isinstance(sizes[d], int) else size_as_index(sizes[d], op.parent)
                                for d in dims], et).result
        shape = [sizes[d] if isinstance(sizes[d], int) else ir.ShapedType.get_dynamic_size() for d in dims]
        in_maps = [remap(maps[a]) for a in args] + [ir.AffineMap.get_identity(len(dims))]
        p = ir.Operation.create(
            "linalg.generic", results=[ir.RankedTensorType.get(shape, et)],
            operands=[ins[a] for a in args] + [empty],
            attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in in_maps]),
                        "iterator_types": iterator_types_attr(["parallel"] * len(dims)),
                        "operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(args), 1])},
            regions=1)
    blk = pat.body(op)
    types = [_elem(ins[a].type) for a in args] + [et]
    nb = p.regions[0].blocks.append(*types, arg_locs=[loc] * len(types))
    mapping = {blk.arguments[a]: nb.arguments[i] for i, a in enumerate(args)}
    with ir.InsertionPoint(nb):
        _clone_into(ops, mapping)
        ir.Operation.create("linalg.yield", operands=[mapping.get(value, value)], loc=loc)
    return p


def _clone_into(ops, mapping: dict) -> None:
    """Clones body ops at the insertion point, reading `mapping`'s values for the old ones (block
    arguments, earlier clones); each clone's results are added to it."""
    for o in ops:
        c = pat.op_of(o.clone())
        for i, v in enumerate(c.operands):
            if v in mapping:
                c.operands[i] = mapping[v]
        for r_old, r_new in zip(o.results, c.results):
            mapping[r_old] = r_new


def _contraction(op, add, mul, ins, maps) -> ir.Operation:
    """`out + a * b` over `ins`: (operand, None) for a computed side, now a prologue's result, or
    (operand, (side value, body ops computing it, block argument read)) for a bare side, whose ops
    (extf, constant scales) are cloned into the new body."""
    out = pat.outputs(op)[0]
    new = ir.Operation.create(
        "linalg.generic", results=[op.results[0].type], operands=[v for v, _ in ins] + [out],
        attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                    "iterator_types": op.attributes["iterator_types"],
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([2, 1])},
        regions=1, loc=op.location)
    blk = pat.body(op)
    types = [_elem(v.type) for v, _ in ins] + [_elem(out.type)]
    nb = new.regions[0].blocks.append(*types, arg_locs=[op.location] * len(types))
    operands = []
    with ir.InsertionPoint(nb):
        for i, (_, side) in enumerate(ins):
            v = nb.arguments[i]
            if side is not None:
                value, ops, arg = side
                mapping = {arg: v}
                _clone_into(ops, mapping)  # every body value they read too: none left dangling
                v = mapping[value]
            operands.append(v)
        m = pat.op_of(mul.clone())
        m.operands[0], m.operands[1] = operands
        a = pat.op_of(add.clone())
        out_arg = blk.arguments[pat.num_inputs(op)]
        a.operands[0], a.operands[1] = ((nb.arguments[2], m.results[0]) if add.operands[0] == out_arg
                                        else (m.results[0], nb.arguments[2]))
        ir.Operation.create("linalg.yield", operands=[a.results[0]], loc=pat.yield_op(op).location)
    return new
