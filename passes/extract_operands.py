"""Broadcast reads written as `tensor.extract` become operands (part of `uniorch-preprocess`).

With symbolic sizes torch-mlir cannot tell whether a dim broadcasts (size 1) or not, so it reads
the smaller tensor inside the body: `tensor.extract %mask[%c0, %c0, select(%t == 1, 0, i2), ...]`.
Sizes symbolic here are 2 or more (runtime/guards.py: 1 is never symbolic), so each such select is
decided (uniorch/ir/dims.py) and the read is an indexing map, `(d0, ..) -> (0, 0, d2, d3)`, as
torch-mlir writes it for static sizes. The tensor is then an input of the generic like any other:
fusion sees it, and the contraction and attention emitters, which read inputs through maps only,
can take a causal mask built from symbolic positions into their epilogue.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir
from torch_mlir.dialects import arith, linalg

from uniorch.codegen import patterns as pat
from uniorch.ir import dims

from .split_prologue import _clone_into


def extracts_as_operands(func_op: ir.Operation) -> int:
    """Rewrites every generic whose body extracts from an outer tensor at decidable positions;
    returns how many generics changed."""
    done = 0
    for op in [o.operation for o in func_op.regions[0].blocks[0].operations]:
        if op.name != "linalg.generic":
            continue
        iotas = _iota_inputs(op)
        reads = _reads(op, iotas)
        if reads:
            _rebuild(op, reads, iotas)
            done += 1
    return done


def _reads(op, iotas: dict) -> list:
    """(extract op, tensor, affine exprs) for each extract of the body that is a plain map read."""
    body = pat.body(op)
    n_loops = len(pat.iterator_types(op))
    sizes = pat.loop_sizes(op)
    out = []
    for e in body.operations:
        e = e.operation
        if e.name != "tensor.extract":
            continue
        t = e.operands[0]
        if not isinstance(t.owner, ir.Block) and pat.op_of(t.owner).parent == op:
            continue  # a tensor made inside the body
        if isinstance(t.owner, ir.Block) and t.owner == body:
            continue
        try:
            shape = dims.known_shape(t)
            exprs = [_index(w, body, iotas) for w in list(e.operands)[1:]]
        except (dims.UnknownSize, ValueError):
            continue
        if any(x is None for x in exprs) or len(exprs) != len(shape):
            continue
        ok = True
        for x, n in zip(exprs, shape):
            if isinstance(x, int):
                ok &= x == 0 and n == 1 or isinstance(n, int) and 0 <= x < n
            elif isinstance(x, _Affine):  # every position the loop takes is inside the dim
                s = sizes[x.dim] if x.dim < n_loops else None
                ok &= isinstance(s, int) and isinstance(n, int) and 0 <= x.low(s) and x.high(s) < n
            else:  # the tensor's dim spans the loop's range, as a map read needs
                ok &= x[1] < n_loops and sizes[x[1]] is not None and dims.prod([sizes[x[1]]]) == dims.prod([n])
        if ok:
            out.append((e, t, exprs))
    return out


@dataclass(frozen=True)
class _Affine:
    """coef * d_dim + const, a position the body computes from one loop's (a flip: `2 - kh`, how
    torch-mlir lowers `aten.flip` and the flipped filters of a convolution's input gradient)."""

    dim: int
    coef: int
    const: int

    def low(self, size: int) -> int:
        return self.const + min(0, self.coef * (size - 1))

    def high(self, size: int) -> int:
        return self.const + max(0, self.coef * (size - 1))

    def expr(self):
        term = ir.AffineMulExpr.get(ir.AffineDimExpr.get(self.dim), ir.AffineConstantExpr.get(self.coef))
        return ir.AffineAddExpr.get(term, ir.AffineConstantExpr.get(self.const))


def _combine(name: str, a, b):
    """`a <op> b` of two positions (see `_index`) when the result is one loop's affine function."""
    def parts(x):
        if isinstance(x, int):
            return None, 0, x
        if isinstance(x, tuple):
            return x[1], 1, 0
        return x.dim, x.coef, x.const

    if a is None or b is None:
        return None
    (da, ca, ka), (db, cb, kb) = parts(a), parts(b)
    if name == "arith.muli":
        if da is not None and db is not None:
            return None
        d, c, k = (da, ca * kb, ka * kb) if db is None else (db, cb * ka, kb * ka)
    else:
        sign = 1 if name == "arith.addi" else -1
        if da is not None and db is not None and da != db:
            return None
        d, c, k = (da if da is not None else db), ca + sign * cb, ka + sign * kb
    if d is None or c == 0:
        return k
    return ("d", d) if (c, k) == (1, 0) else _Affine(d, c, k)


def _index(w, body, iotas: dict):
    """A loop dim (int position as ("d", n), or ("d", n, i) when it is the value of iota input i),
    an affine function of one (`_Affine`) or a constant for an index value of the body, deciding
    selects on sizes; None when it is anything else."""
    if isinstance(w.owner, ir.Block):
        if w.owner == body and w.arg_number in iotas:
            return ("d", iotas[w.arg_number], w.arg_number)
        return None
    o = pat.op_of(w.owner)
    if o.name == "arith.constant":
        return int(ir.IntegerAttr(o.attributes["value"]).value)
    if o.name == "linalg.index":
        return ("d", int(ir.IntegerAttr(o.attributes["dim"]).value))
    if o.name == "arith.index_cast":
        return _index(o.operands[0], body, iotas)
    if o.name in ("arith.addi", "arith.subi", "arith.muli"):
        return _combine(o.name, *(_index(v, body, iotas) for v in o.operands))
    if o.name == "arith.select" and o.parent is not None:
        try:
            pick = dims.decide(o.operands[0])
        except dims.UnknownSize:
            pick = _wraps_negative(o, body, iotas)
            if pick is None:
                return None
        return _index(o.operands[1] if pick else o.operands[2], body, iotas)
    return None


def _wraps_negative(sel, body, iotas: dict):
    """False for `select(i < 0, i + n, i)` of a loop position i (PyTorch's negative-index wrap,
    which a position never takes); None for any other select."""
    c = sel.operands[0]
    if isinstance(c.owner, ir.Block):
        return None
    cmp = pat.op_of(c.owner)
    if cmp.name != "arith.cmpi" or ir.IntegerAttr(cmp.attributes["predicate"]).value != 2:  # slt
        return None
    zero = cmp.operands[1]
    if isinstance(zero.owner, ir.Block) or pat.op_of(zero.owner).name != "arith.constant" \
            or ir.IntegerAttr(pat.op_of(zero.owner).attributes["value"]).value != 0:
        return None
    x = _index(cmp.operands[0], body, iotas)
    if not isinstance(x, tuple) or sel.operands[2] != cmp.operands[0]:
        return None
    return False


def _iota_inputs(op) -> dict:
    """{input number: loop dim} for inputs that are `arange(n)` (a 1-d generic yielding its index,
    seen through unit-dim reshapes) read along one loop dim: each element is that loop's position."""
    out = {}
    maps = pat.indexing_maps(op)
    sizes = pat.loop_sizes(op)
    for i, v in enumerate(pat.inputs(op)):
        if not isinstance(v.type, ir.RankedTensorType) or not ir.RankedTensorType(v.type).has_static_shape:
            continue
        shape = list(ir.RankedTensorType(v.type).shape)
        big = [p for p, n in enumerate(shape) if n != 1]
        if len(big) != 1 or not _is_iota(_through_unit_views(v)):
            continue
        e = maps[i].results[big[0]]
        if isinstance(e, ir.AffineDimExpr) and sizes[e.position] == shape[big[0]]:
            out[i] = e.position
    return out


def _through_unit_views(v):
    while not isinstance(v.owner, ir.Block) and pat.op_of(v.owner).name in ("tensor.expand_shape", "tensor.collapse_shape"):
        v = pat.op_of(v.owner).operands[0]
    return v


def _is_iota(v) -> bool:
    if isinstance(v.owner, ir.Block):
        return False
    g = pat.op_of(v.owner)
    if not pat.is_generic(g) or pat.num_inputs(g) != 0 or len(g.results) != 1 or len(pat.iterator_types(g)) != 1:
        return False
    ops = pat.body_ops(g)
    if [o.name for o in ops] != ["linalg.index", "arith.index_cast"]:
        return False
    yielded = list(pat.body(g).operations)[-1].operands[0]
    return ops[1].operands[0] == ops[0].results[0] and yielded == ops[1].results[0]


def _rebuild(op, reads: list, iotas: dict) -> None:
    """op with each read an input through its map, and the iota inputs `iotas` ({input: loop dim})
    replaced by their loop's position (`linalg.index`), so the arange is not read at all."""
    body = pat.body(op)
    n_in = pat.num_inputs(op)
    keep = [i for i in range(n_in) if i not in iotas]
    ins, outs = [op.operands[i] for i in keep], list(op.operands)[n_in:]
    maps = pat.indexing_maps(op)
    n_loops = len(pat.iterator_types(op))
    new_maps = []
    for _, _, exprs in reads:
        res = [ir.AffineDimExpr.get(x[1]) if isinstance(x, tuple) else x.expr() if isinstance(x, _Affine)
               else ir.AffineConstantExpr.get(x) for x in exprs]
        new_maps.append(ir.AffineMap.get(n_loops, 0, res))
    attrs = {name: op.attributes[name] for name in op.attributes}
    attrs["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in [maps[i] for i in keep] + new_maps + maps[n_in:]])
    attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([len(keep) + len(reads), len(outs)])
    with ir.InsertionPoint(op), op.location:
        new = ir.Operation.create("linalg.generic", results=[r.type for r in op.results],
                                  operands=ins + [t for _, t, _ in reads] + outs, attributes=attrs, regions=1,
                                  loc=op.location)
        args = list(body.arguments)
        types = ([args[i].type for i in keep] + [ir.RankedTensorType(t.type).element_type for _, t, _ in reads]
                 + [a.type for a in args[n_in:]])
        nb = new.regions[0].blocks.append(*types, arg_locs=[op.location] * len(types))
        mapping = {}
        for j, i in enumerate(keep):
            mapping[args[i]] = nb.arguments[j]
        for i, a in enumerate(args[n_in:]):
            mapping[a] = nb.arguments[len(keep) + len(reads) + i]
        for k, (e, _, _) in enumerate(reads):
            mapping[e.results[0]] = nb.arguments[len(keep) + k]
        skip = [e for e, _, _ in reads]
        with ir.InsertionPoint(nb):
            for i, d in iotas.items():
                pos = linalg.IndexOp(d).result
                mapping[args[i]] = arith.IndexCastOp(args[i].type, pos).result
            _clone_into([o.operation for o in body.operations if not any(o.operation == s for s in skip)], mapping)
    _fold_positions(nb, pat.loop_sizes(op))
    _erase_dead(nb)
    for old, r in zip(op.results, new.results):
        old.replace_all_uses_with(r)
    op.erase()


# arith.cmpi predicates over [lo, hi] against a constant c: True / False where decided
_DECIDE = {
    0: lambda lo, hi, c: (lo == hi == c) or (None if lo <= c <= hi else False),   # eq
    1: lambda lo, hi, c: (not (lo == hi == c)) and (None if lo <= c <= hi else True),  # ne
    2: lambda lo, hi, c: True if hi < c else (False if lo >= c else None),   # slt
    3: lambda lo, hi, c: True if hi <= c else (False if lo > c else None),   # sle
    4: lambda lo, hi, c: True if lo > c else (False if hi <= c else None),   # sgt
    5: lambda lo, hi, c: True if lo >= c else (False if hi < c else None),   # sge
}


def _fold_positions(block, sizes) -> None:
    """Compares of a loop position with a constant that its range decides (an arange's `i >= 0`,
    now `linalg.index`), and the `andi`/`select` they feed, fold to what they always are: the mask
    body is then as small as what it computes."""
    def const_of(v):
        if isinstance(v.owner, ir.Block):
            return None
        c = pat.op_of(v.owner)
        return ir.IntegerAttr(c.attributes["value"]).value if c.name == "arith.constant" else None

    def position(v):
        while not isinstance(v.owner, ir.Block) and pat.op_of(v.owner).name == "arith.index_cast":
            v = pat.op_of(v.owner).operands[0]
        if isinstance(v.owner, ir.Block) or pat.op_of(v.owner).name != "linalg.index":
            return None
        n = sizes[ir.IntegerAttr(pat.op_of(v.owner).attributes["dim"]).value]
        return n if isinstance(n, int) else None

    for o in [x.operation for x in block.operations]:
        if o.name == "arith.cmpi":
            n, c = position(o.operands[0]), const_of(o.operands[1])
            pred = ir.IntegerAttr(o.attributes["predicate"]).value
            if n is None or c is None or pred not in _DECIDE:
                continue
            got = _DECIDE[pred](0, n - 1, c)
            if got is not None:
                with ir.InsertionPoint(o), o.location:
                    k = arith.ConstantOp(ir.IntegerType.get_signless(1), int(got)).result
                o.results[0].replace_all_uses_with(k)
        elif o.name in ("arith.andi", "arith.select"):
            c = const_of(o.operands[0])
            t = o.operands[0].type
            i1 = isinstance(t, ir.IntegerType) and ir.IntegerType(t).width == 1
            if c is None or not i1:
                continue
            if o.name == "arith.select":
                o.results[0].replace_all_uses_with(o.operands[1] if c else o.operands[2])
            elif c:  # true & x
                o.results[0].replace_all_uses_with(o.operands[1])
            else:
                o.results[0].replace_all_uses_with(o.operands[0])


def _erase_dead(block) -> None:
    """The index arithmetic the extracts read, now unused (it may read sizes from outside)."""
    changed = True
    while changed:
        changed = False
        for o in reversed(list(block.operations)):
            o = o.operation
            if o.name in _PURE and not any(list(r.uses) for r in o.results):
                o.erase()
                changed = True


_PURE = ("arith.select", "arith.cmpi", "linalg.index", "arith.constant", "arith.index_cast", "arith.addi",
         "arith.subi", "arith.muli", "arith.andi", "arith.ori", "arith.extui", "arith.extsi", "arith.trunci")
