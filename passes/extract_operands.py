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

from torch_mlir import ir

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
        reads = _reads(op)
        if reads:
            _rebuild(op, reads)
            done += 1
    return done


def _reads(op) -> list:
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
            exprs = [_index(w, body) for w in list(e.operands)[1:]]
        except (dims.UnknownSize, ValueError):
            continue
        if any(x is None for x in exprs) or len(exprs) != len(shape):
            continue
        ok = True
        for x, n in zip(exprs, shape):
            if isinstance(x, int):
                ok &= x == 0 and n == 1 or isinstance(n, int) and 0 <= x < n
            else:  # the tensor's dim spans the loop's range, as a map read needs
                ok &= x[1] < n_loops and sizes[x[1]] is not None and dims.prod([sizes[x[1]]]) == dims.prod([n])
        if ok:
            out.append((e, t, exprs))
    return out


def _index(w, body):
    """A loop dim (int position as ("d", n)) or constant for an index value of the body, deciding
    selects on sizes; None when it is anything else."""
    if isinstance(w.owner, ir.Block):
        return None
    o = pat.op_of(w.owner)
    if o.name == "arith.constant":
        return int(ir.IntegerAttr(o.attributes["value"]).value)
    if o.name == "linalg.index":
        return ("d", int(ir.IntegerAttr(o.attributes["dim"]).value))
    if o.name == "arith.select" and o.parent is not None:
        try:
            pick = dims.decide(o.operands[0])
        except dims.UnknownSize:
            return None
        return _index(o.operands[1] if pick else o.operands[2], body)
    return None


def _rebuild(op, reads: list) -> None:
    body = pat.body(op)
    n_in = pat.num_inputs(op)
    ins, outs = list(op.operands)[:n_in], list(op.operands)[n_in:]
    maps = pat.indexing_maps(op)
    n_loops = len(pat.iterator_types(op))
    new_maps = []
    for _, _, exprs in reads:
        res = [ir.AffineDimExpr.get(x[1]) if isinstance(x, tuple) else ir.AffineConstantExpr.get(x)
               for x in exprs]
        new_maps.append(ir.AffineMap.get(n_loops, 0, res))
    attrs = {name: op.attributes[name] for name in op.attributes}
    attrs["indexing_maps"] = ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps[:n_in] + new_maps + maps[n_in:]])
    attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get([n_in + len(reads), len(outs)])
    with ir.InsertionPoint(op), op.location:
        new = ir.Operation.create("linalg.generic", results=[r.type for r in op.results],
                                  operands=ins + [t for _, t, _ in reads] + outs, attributes=attrs, regions=1,
                                  loc=op.location)
        args = list(body.arguments)
        types = ([a.type for a in args[:n_in]] + [ir.RankedTensorType(t.type).element_type for _, t, _ in reads]
                 + [a.type for a in args[n_in:]])
        nb = new.regions[0].blocks.append(*types, arg_locs=[op.location] * len(types))
        mapping = {}
        for i, a in enumerate(args):
            mapping[a] = nb.arguments[i if i < n_in else i + len(reads)]
        for k, (e, _, _) in enumerate(reads):
            mapping[e.results[0]] = nb.arguments[n_in + k]
        skip = [e for e, _, _ in reads]
        with ir.InsertionPoint(nb):
            _clone_into([o.operation for o in body.operations if not any(o.operation == s for s in skip)], mapping)
    _erase_dead(nb)
    for old, r in zip(op.results, new.results):
        old.replace_all_uses_with(r)
    op.erase()


def _erase_dead(block) -> None:
    """The index arithmetic the extracts read, now unused (it may read sizes from outside)."""
    changed = True
    while changed:
        changed = False
        for o in reversed(list(block.operations)):
            o = o.operation
            if o.name in ("arith.select", "arith.cmpi", "linalg.index", "arith.constant", "arith.index_cast") and \
                    not any(list(r.uses) for r in o.results):
                o.erase()
                changed = True
