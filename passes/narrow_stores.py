"""Results computed in a 16-bit type leave their generic in it; part of `uniorch-preprocess`.

Why: a bf16 model's ops compute in fp32 and round to bf16 where eager would (`truncf`), and the
next op widens again (`extf`). Upstream elementwise fusion pulls that `extf` into the producer, so
a LayerNorm or a matmul's epilogue yields `extf(truncf(v))`: an f32 tensor holding bf16 values. If
a kernel boundary falls there, twice the bytes go to memory and back. This pass splits the widening
off again: the producer yields `truncf(v)` into a 16-bit tensor, and a one-op pointwise generic
widens it. Fusion then puts the widening in whichever kernel reads the value (a contraction loads
the 16-bit tile for `tl.dot` as it is), and the value is stored in 16 bits. Rounding happens at the
same place as before, so results are bit for bit the same.

A widening read through a reshape (q widened for SDPA's float32 math, then split into grouped-query
heads; GroupNorm's input reshaped to its groups) moves below it (`sink_widenings`): the reshape
takes the 16-bit tensor and each reshape gets its own widening, so the readers see a widening they
can take as a cheap producer, and the producer stores 16 bits.

The mirror case: an f32 value every reader rounds to 16 bits first (a matmul's accumulator read by
`silu(g) * u`, a convolution's by BatchNorm inside a pooling) is rounded by a one-op generic right
after it and the readers take the 16-bit tensor; fusion puts that rounding in the producer's kernel
(passes/fuse.py never takes it as another kernel's producer), which then stores 16 bits.
"""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import tensor

from uniorch.codegen import patterns as pat
from uniorch.codegen.domain import is_unit_view

from .gather_casts import _widening_generic
from .ir_utils import iterator_types_attr
from .split_prologue import _clone_into

_NARROW_TYPES = ("bf16", "f16")


def narrow_stores(func_op: ir.Operation) -> None:
    block = func_op.regions[0].blocks[0]
    for op in [o.operation for o in block.operations]:
        if pat.is_pointwise(op) and op.results:
            widened = _widened_results(op)
            if widened:
                _split(op, widened)
    changed = True
    while changed:  # readers are rebuilt: look again from the top after each rewrite
        changed = False
        for op in [o.operation for o in block.operations]:
            if not pat.is_generic(op):
                continue
            for res in op.results:
                narrow = _narrowed_by_every_reader(res)
                if narrow is not None:
                    _narrow_at_source(res, narrow)
                    changed = True
                    break
            if changed:
                break


def _truncations(user: ir.Operation, i: int):
    """The 16-bit type every use of input `i`'s block argument in `user`'s body truncates it to
    (None if some use does something else)."""
    arg = pat.body(user).arguments[i]
    uses = [pat.op_of(u.owner) for u in arg.uses]
    if not uses or any(o.name != "arith.truncf" for o in uses):
        return None
    types = {str(o.results[0].type) for o in uses}
    return types.pop() if len(types) == 1 and next(iter(types)) in _NARROW_TYPES else None


def _narrowed_by_every_reader(v: ir.Value):
    """The 16-bit type, if `v` (f32) is read only as inputs of generics that truncate it first
    (a matmul's f32 accumulator, rounded to bf16 by the op reading it): then it can be rounded
    where it is computed and stored in 16 bits."""
    if str(ir.RankedTensorType(v.type).element_type) != "f32" or not ir.RankedTensorType(v.type).has_static_shape:
        return None
    found, readers = set(), []
    for u in v.uses:
        user = pat.op_of(u.owner)
        if pat.is_assert_only(user):
            continue  # a shape check, erased before fusion
        if not pat.is_generic(user) or u.operand_number >= pat.num_inputs(user):
            return None
        t = _truncations(user, u.operand_number)
        if t is None:
            return None
        found.add(t)
        readers.append(user)
    if all(pat.is_cast_only(r, "arith.truncf") for r in readers):
        return None  # already rounded right where it is computed
    return found.pop() if len(found) == 1 else None


def _narrow_at_source(v: ir.Value, narrow: str) -> None:
    """`v` rounded by a pointwise generic of its own right after it; its readers take the rounded
    tensor, their truncations replaced by the block argument."""
    users = [(pat.op_of(u.owner), u.operand_number) for u in v.uses if not pat.is_assert_only(pat.op_of(u.owner))]
    shape = list(ir.RankedTensorType(v.type).shape)
    producer = pat.op_of(v.owner)
    with ir.InsertionPoint.after(producer), producer.location:
        rounded = _cast(v, ir.RankedTensorType.get(shape, ir.Type.parse(narrow)), "arith.truncf")
    by_user = []
    for user, i in users:
        entry = next((e for e in by_user if e[0] == user), None)
        if entry is None:
            by_user.append((user, [i]))
        elif i not in entry[1]:
            entry[1].append(i)
    for user, idx in by_user:
        _reread(user, idx, rounded)


def _reread(op: ir.Operation, idx: list, rounded: ir.Value) -> None:
    """`op` with inputs `idx` replaced by `rounded` (16-bit): their block arguments take that
    type and replace the truncations of them."""
    blk = pat.body(op)
    operands = list(op.operands)
    for i in idx:
        operands[i] = rounded
    attrs = {op.attributes[k].name: op.attributes[k].attr for k in range(len(op.attributes))}
    loc = op.location
    with ir.InsertionPoint(op), loc:
        new = ir.Operation.create("linalg.generic", results=[r.type for r in op.results], operands=operands,
                                  attributes=attrs, regions=1)
        types = [a.type for a in blk.arguments]
        for i in idx:
            types[i] = ir.RankedTensorType(rounded.type).element_type
        nb = new.regions[0].blocks.append(*types, arg_locs=[loc] * len(types))
        mapping = {a: b for a, b in zip(blk.arguments, nb.arguments)}
        truncs = []
        for i in idx:
            for u in blk.arguments[i].uses:
                t = pat.op_of(u.owner)
                truncs.append(t)
                mapping[t.results[0]] = nb.arguments[i]
        with ir.InsertionPoint(nb):
            _clone_into([o.operation for o in blk.operations if not any(o.operation == t for t in truncs)], mapping)
    for r_old, r_new in zip(op.results, new.results):
        r_old.replace_all_uses_with(r_new)
    op.erase()


def _widened_results(op: ir.Operation) -> dict:
    """{result number: the 16-bit body value it widens} for results yielding `extf(v)`, v computed
    in the body (not an input passed through) and the result's outs argument unread."""
    blk = pat.body(op)
    n_in = pat.num_inputs(op)
    out = {}
    for r, y in enumerate(pat.yield_op(op).operands):
        if isinstance(y.owner, ir.Block):
            continue
        ext = pat.op_of(y.owner)
        if ext.name != "arith.extf":
            continue
        v = ext.operands[0]
        if str(v.type) not in _NARROW_TYPES or isinstance(v.owner, ir.Block):
            continue
        if list(blk.arguments[n_in + r].uses):
            continue
        out[r] = v
    return out


def _split(op: ir.Operation, widened: dict) -> None:
    blk = pat.body(op)
    n_in = pat.num_inputs(op)
    ins, outs = pat.inputs(op), pat.outputs(op)
    loc = op.location
    with ir.InsertionPoint(op), loc:
        new_outs, new_types = [], []
        for r, (o, res) in enumerate(zip(outs, op.results)):
            if r in widened:
                shape = list(ir.RankedTensorType(res.type).shape)
                nt = widened[r].type
                new_outs.append(tensor.EmptyOp(shape, nt).result)
                new_types.append(ir.RankedTensorType.get(shape, nt))
            else:
                new_outs.append(o)
                new_types.append(res.type)
        attrs = {op.attributes[i].name: op.attributes[i].attr for i in range(len(op.attributes))}
        new = ir.Operation.create("linalg.generic", results=new_types, operands=list(ins) + new_outs,
                                  attributes=attrs, regions=1)
        types = [a.type for a in blk.arguments[:n_in]] + [ir.RankedTensorType(t).element_type for t in new_types]
        nb = new.regions[0].blocks.append(*types, arg_locs=[loc] * len(types))
        mapping = {blk.arguments[i]: nb.arguments[i] for i in range(n_in)}
        for r in range(len(outs)):
            if r not in widened:
                mapping[blk.arguments[n_in + r]] = nb.arguments[n_in + r]
        yop = pat.yield_op(op)
        dead = [pat.op_of(yop.operands[r].owner) for r in widened]  # the widenings, unless read elsewhere
        dead = [e for e in dead if all(pat.op_of(u.owner) == yop for u in e.results[0].uses)]
        with ir.InsertionPoint(nb):
            body = [o.operation for o in blk.operations][:-1]
            _clone_into([o for o in body if not any(o == e for e in dead)], mapping)
            yields = [mapping[widened[r]] if r in widened else mapping.get(v, v)
                      for r, v in enumerate(pat.yield_op(op).operands)]
            ir.Operation.create("linalg.yield", operands=yields, loc=pat.yield_op(op).location)
        replacements = []
        for r, res in enumerate(op.results):
            if r in widened:
                replacements.append(_cast(new.results[r], res.type, "arith.extf"))
            else:
                replacements.append(new.results[r])
    for res, rep in zip(op.results, replacements):
        res.replace_all_uses_with(rep)
    op.erase()


_RESHAPES = ("tensor.expand_shape", "tensor.collapse_shape")


def sink_widenings(func_op: ir.Operation) -> None:
    """Widenings read through reshapes move below them (module doc). After tile_stats: a norm's
    statistics of a convolution's output are matched through the widening before its reshapes."""
    block = func_op.regions[0].blocks[0]
    # collected first: the sink erases reshapes (and the widening) as it goes
    for op in [o.operation for o in block.operations if pat.is_generic(o.operation)]:
        cast = _widening_generic(op)
        if cast is not None and cast.name == "arith.extf":
            _sink_below_reshapes(op)


def _sink_below_reshapes(widening: ir.Operation) -> None:
    """Each static reshape (not a unit view) of `widening`'s result that only generics or reshapes
    read becomes a reshape of its 16-bit input followed by a widening of its own, moved on below
    those reshapes too (the widening before is erased once unread). Where the reshape is returned
    the f32 tensor must be written anyway: left as it is."""
    src = widening.operands[0]
    narrow = ir.RankedTensorType(src.type).element_type
    for u in list(widening.results[0].uses):
        view = pat.op_of(u.owner)
        if view.name not in _RESHAPES or u.operand_number != 0 or len(view.operands) != 1 or is_unit_view(view):
            continue  # fusion reads through unit views (a keepdim); a dynamic expand has more operands
        res_ty = ir.RankedTensorType(view.results[0].type)
        readers = [pat.op_of(r.owner) for r in view.results[0].uses]
        if not res_ty.has_static_shape or not readers \
                or not all(pat.is_generic(r) or r.name in _RESHAPES for r in readers):
            continue
        attrs = {view.attributes[i].name: view.attributes[i].attr for i in range(len(view.attributes))}
        with ir.InsertionPoint(view), view.location:
            moved = ir.Operation.create(view.name, results=[ir.RankedTensorType.get(list(res_ty.shape), narrow)],
                                        operands=[src], attributes=attrs)
            wide = _cast(moved.results[0], res_ty, "arith.extf")
        view.results[0].replace_all_uses_with(wide)
        view.erase()
        _sink_below_reshapes(pat.op_of(wide.owner))  # a reshape of the reshape (GroupNorm's groups)
    if not list(widening.results[0].uses):
        widening.erase()


def _cast(v: ir.Value, ty: ir.Type, cast: str) -> ir.Value:
    """A pointwise generic applying `cast` (`arith.extf` / `arith.truncf`) to `v`, into a fresh
    tensor of type `ty`, at the current insertion point and location."""
    rank = ir.RankedTensorType(ty).rank
    ident = ir.AffineMap.get_identity(rank)
    et = ir.RankedTensorType(ty).element_type
    empty = tensor.EmptyOp(list(ir.RankedTensorType(ty).shape), et).result
    g = ir.Operation.create(
        "linalg.generic", results=[ty], operands=[v, empty],
        attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(ident)] * 2),
                    "iterator_types": iterator_types_attr(["parallel"] * rank),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 1])},
        regions=1)
    loc = ir.Location.current
    nb = g.regions[0].blocks.append(ir.RankedTensorType(v.type).element_type, et, arg_locs=[loc, loc])
    with ir.InsertionPoint(nb):
        c = ir.Operation.create(cast, results=[et], operands=[nb.arguments[0]])
        ir.Operation.create("linalg.yield", operands=[c.results[0]])
    return g.results[0]
