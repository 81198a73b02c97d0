"""A returned transpose of a computed value as a view of it, where eager returns that view.

torch-mlir lowers `transpose`/`permute` to a copy (a `linalg.generic` yielding its input through a
permuted map). A training forward returns q, k and v for the backward as eager's views of one
projection: `qkv.split(c, 2)[i].view(b, t, h, d).transpose(1, 2)`. Each was copied by a kernel of
its own (GPT-2 small's block at 8 x 1024 tokens: 151 MB of its forward's 1017 MB) where eager
copies nothing.

Rewritten: a result of `@main` computed by such a copy is returned as a `linalg.transpose` at
`@main`'s level instead, which the launch plan makes a `permute` of its operand (runtime/plan.py),
as it makes `extract_slice` a slice; fusion leaves it alone, and a kernel reading the copy still
reads it through its indexing map. Only where:
- the view has eager's own strides and storage offset, as the importer records them from the FX
  graph (`uniorch.result_layouts`): the caller sees eager's layout, and the boundary copies nothing;
- the operand is a computed value seen through views (slices, reshapes), not an input of the
  graph: a view of the caller's tensor would alias it where eager may have copied;
- no other result shares an element with it (q, k and v are disjoint slices of one projection):
  eager may hold them apart, and a write to one must not show in the other.
"""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import linalg, tensor

from uniorch.codegen import patterns as pat
from uniorch.runtime.kernel_bytes import _box

LAYOUTS = "uniorch.result_layouts"


def record_result_layouts(module: ir.Module, graph) -> None:
    """Eager's (strides..., offset) of each result of `@main`, from the example values of the FX
    graph it was imported from (an empty entry where unknown); nothing when they do not line up."""
    from .ir_utils import main_func

    out = next(n for n in graph.nodes if n.op == "output")
    returned = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
    values = [getattr(a, "meta", {}).get("val") for a in returned]
    main = main_func(module)
    ret = list(main.regions[0].blocks[0].operations)[-1]
    if ret.name != "func.return" or len(ret.operands) != len(values):
        return
    with module.context:
        entries = []
        for val in values:  # the results may be torch-dialect tensors still: shapes are checked on use
            layout = []
            if _static_layout(val):
                layout = [int(s) for s in val.stride()] + [int(val.storage_offset())]
            entries.append(ir.DenseI64ArrayAttr.get(layout))
        main.attributes[LAYOUTS] = ir.ArrayAttr.get(entries)


def _static_layout(val) -> bool:
    import torch

    return isinstance(val, torch.Tensor) and all(
        isinstance(s, int) for s in (*val.shape, *val.stride(), val.storage_offset()))


def returned_permutes_as_views(main) -> int:
    """Rewrites each returned permuting copy whose view has eager's layout; returns how many."""
    if LAYOUTS not in main.attributes:
        return 0
    block = main.regions[0].blocks[0]
    ret = list(block.operations)[-1]
    layouts = [list(ir.DenseI64ArrayAttr(a)) for a in ir.ArrayAttr(main.attributes[LAYOUTS])]
    found = {}  # result index -> (the copy, its permutation, the value it copies)
    for i, v in enumerate(ret.operands):
        if not layouts[i] or isinstance(v.owner, ir.Block):
            continue
        g = pat.op_of(v.owner)
        perm = _permutation(g)
        have = _layout(pat.inputs(g)[0]) if perm is not None else None
        if have is None:
            continue
        strides, offset = [have[0][p] for p in perm], have[1]
        want, shape = layouts[i], ir.RankedTensorType(v.type).shape
        if len(want) == len(strides) + 1 and offset == want[-1] \
                and all(n == 1 or a == b for n, a, b in zip(shape, strides, want)):
            found[i] = (g, perm, pat.inputs(g)[0])
    # what the caller gets: the copied values' own storage where a view replaces a copy
    held = [found[i][2] if i in found else v for i, v in enumerate(ret.operands)]
    done = 0
    for i, (g, perm, src) in found.items():
        if not all(_apart(src, w) for j, w in enumerate(held) if j != i):
            continue  # results that eager holds apart must not share elements (writes to one would show)
        with g.context, g.location, ir.InsertionPoint(g):
            t = ir.RankedTensorType(ret.operands[i].type)
            init = tensor.EmptyOp(list(t.shape), t.element_type).result
            view = linalg.transpose(src, outs=[init], permutation=perm)
        ret.operands[i] = view.results[0]  # a kernel reading the copy reads it through its map still
        if not list(g.results[0].uses):
            g.erase()
        done += 1
    return done


_VIEWS = ("tensor.extract_slice", "tensor.expand_shape", "tensor.collapse_shape", "linalg.transpose")


def _storage(v):
    while not isinstance(v.owner, ir.Block) and pat.op_of(v.owner).name in _VIEWS:
        v = pat.op_of(v.owner).operands[0]
    return v


def _apart(a, b) -> bool:
    """Whether returned values a and b share no element: different storage, or disjoint boxes of
    one (unknown parts of one storage count as shared)."""
    if _storage(a) != _storage(b):
        return True
    parts = []
    for v in (a, b):
        while not isinstance(v.owner, ir.Block) and pat.op_of(v.owner).name == "linalg.transpose":
            v = pat.op_of(v.owner).operands[0]
        part = _box(v)
        if part is None or part[0] != _storage(v):
            return False
        parts.append(part[1])
    return any(hi_a <= lo_b or hi_b <= lo_a for (lo_a, hi_a), (lo_b, hi_b) in zip(*parts))


def _permutation(g) -> list[int] | None:
    """linalg.transpose's permutation for a generic that copies its one input through a
    permutation of all its loops (result dim i is the input's dim perm[i]), else None."""
    if not pat.is_generic(g) or not pat.is_data_movement(g) or len(g.results) != 1:
        return None
    m_in, m_out = pat.indexing_maps(g)
    if not pat.is_identity_map(m_out) or any(not isinstance(e, ir.AffineDimExpr) for e in m_in.results):
        return None
    dims_in = [e.position for e in m_in.results]
    if sorted(dims_in) != list(range(len(dims_in))) or dims_in == sorted(dims_in):
        return None
    src, res = ir.RankedTensorType(pat.inputs(g)[0].type), ir.RankedTensorType(g.results[0].type)
    if src.element_type != res.element_type or not src.has_static_shape:
        return None
    perm = [dims_in.index(i) for i in range(len(dims_in))]
    return perm


def _layout(v) -> tuple[list[int], int] | None:
    """(strides, offset) of `v` seen through static views of a value a kernel computes, written
    contiguous; None for an input of the graph, a constant, or a view torch could not take."""
    if isinstance(v.owner, ir.Block):
        return None
    op = pat.op_of(v.owner)
    t = ir.RankedTensorType(v.type)
    if not t.has_static_shape:
        return None
    if op.name == "tensor.extract_slice":
        base = _layout(op.operands[0])
        if base is None or len(op.operands) != 1:
            return None
        offs, sizes, steps = (list(ir.DenseI64ArrayAttr(op.attributes[k]))
                              for k in ("static_offsets", "static_sizes", "static_strides"))
        if list(t.shape) != sizes:  # rank-reducing: which unit dims went is not said here
            return None
        strides, offset = base
        return [s * k for s, k in zip(strides, steps)], offset + sum(o * s for o, s in zip(offs, strides))
    if op.name == "tensor.expand_shape":
        base = _layout(op.operands[0])
        if base is None:
            return None
        out = []
        for group, s in zip(_reassociation(op), base[0]):
            inner = s
            part = []
            for d in reversed(group):
                part.append(inner)
                inner *= t.shape[d]
            out.extend(reversed(part))
        return out, base[1]
    if op.name == "tensor.collapse_shape":
        base = _layout(op.operands[0])
        if base is None:
            return None
        src = ir.RankedTensorType(op.operands[0].type).shape
        out = []
        for group in _reassociation(op):
            kept = [d for d in group if src[d] != 1]
            for a, b in zip(kept, kept[1:]):
                if base[0][a] != base[0][b] * src[b]:
                    return None  # not a view: torch's reshape would copy
            out.append(base[0][kept[-1]] if kept else 1)
        return out, base[1]
    if op.name in ("arith.constant", "tensor.empty") or op.name.startswith("tensor."):
        return None
    strides, step = [], 1
    for n in reversed(t.shape):
        strides.append(step)
        step *= n
    return strides[::-1], 0


def _reassociation(op) -> list[list[int]]:
    return [[ir.IntegerAttr(d).value for d in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes["reassociation"])]
