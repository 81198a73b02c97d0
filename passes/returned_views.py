"""A returned transpose of a computed value as a view of it, where eager returns that view.

torch-mlir lowers `transpose`/`permute` to a copy (a `linalg.generic` yielding its input through a
permuted map). A training forward returns q, k and v for the backward as eager's views of one
projection: `qkv.split(c, 2)[i].view(b, t, h, d).transpose(1, 2)`. Each was copied by a kernel of
its own (GPT-2 small's block at 8 x 1024 tokens: 151 MB of its forward's 1017 MB) where eager
copies nothing.

Rewritten: a result of `@main` computed by such copies (and reshapes: nanoGPT saves bmm's
(B*H, T, d) operands; a copy may drop or add unit dims) is returned as views instead: reshapes
and a `linalg.transpose`, which the launch plan makes a `permute` of its operand (runtime/plan.py),
as it makes `extract_slice` a slice. Fusion leaves it alone, and a kernel reading the copy still
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

from uniorch.capture.eager_layouts import EAGER_LAYOUT
from uniorch.codegen import patterns as pat
from uniorch.runtime.kernel_bytes import _box

from .ir_utils import (contiguous_strides, main_func, merge_strides, reassociation_attr, reassociation_groups,
                       split_strides)

LAYOUTS = "uniorch.result_layouts"
STORAGES = "uniorch.result_storages"  # per result, which of eager's storages it views (-1 unknown)


def record_result_layouts(module: ir.Module, graph) -> None:
    """Eager's (strides..., offset) of each result of `@main`, from the example values of the FX
    graph it was imported from (an empty entry where unknown); nothing when they do not line up."""
    out = next(n for n in graph.nodes if n.op == "output")
    returned = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
    values = [getattr(a, "meta", {}).get("val") for a in returned]
    main = main_func(module)
    ret = list(main.regions[0].blocks[0].operations)[-1]
    if ret.name != "func.return" or len(ret.operands) != len(values):
        return
    eager = [getattr(a, "meta", {}).get(EAGER_LAYOUT) for a in returned]
    with module.context:
        entries, keys = [], []
        for val, lay in zip(values, eager):  # the results may be torch-dialect tensors still: shapes are checked on use
            layout, key = [], None
            if lay is not None:  # as the ATen op returns it, before decomposition (capture/eager_layouts.py)
                layout, key = [*lay[1], lay[2]], ("eager", lay[3])
            elif _static_layout(val):
                layout = [int(s) for s in val.stride()] + [int(val.storage_offset())]
                key = ("traced", _storage_key(val))
            entries.append(ir.DenseI64ArrayAttr.get(layout))
            keys.append(key if key is not None and key[1] is not None else None)
        main.attributes[LAYOUTS] = ir.ArrayAttr.get(entries)
        first: dict = {}
        # per result, the first result on the same storage (eager's aliasing); -1 where unknown
        groups = [first.setdefault(k, i) if k is not None else -1 for i, k in enumerate(keys)]
        main.attributes[STORAGES] = ir.DenseI64ArrayAttr.get(groups)


def _storage_key(val):
    from torch.multiprocessing.reductions import StorageWeakRef

    try:
        return StorageWeakRef(val.untyped_storage()).cdata
    except Exception:  # noqa: BLE001 - a tensor without storage
        return None


def _static_layout(val) -> bool:
    import torch

    return isinstance(val, torch.Tensor) and all(
        isinstance(s, int) for s in (*val.shape, *val.stride(), val.storage_offset()))


def returned_permutes_as_views(main) -> int:
    """Rewrites each returned copy whose view has eager's layout; returns how many."""
    if LAYOUTS not in main.attributes:
        return 0
    block = main.regions[0].blocks[0]
    ret = list(block.operations)[-1]
    layouts = [list(ir.DenseI64ArrayAttr(a)) for a in ir.ArrayAttr(main.attributes[LAYOUTS])]
    found = {}  # result index -> (the value the copies read, the copies and reshapes from it)
    for i, v in enumerate(ret.operands):
        if not isinstance(v.type, ir.RankedTensorType):  # a size returned (a symbolic cache length)
            continue
        base, steps = _steps(v) if layouts[i] else (None, [])
        layout = _layout(base) if any(kind == "copy" for kind, *_ in steps) else None
        for kind, op, *owner in steps:
            if layout is not None and kind == "copy":
                layout = ([layout[0][k] if k is not None else 1 for k in owner[0]], layout[1])
            elif layout is not None:
                layout = _reshaped(op, layout)
        want, shape = layouts[i], ir.RankedTensorType(v.type).shape
        if layout is not None and len(want) == len(shape) + 1 and layout[1] == want[-1] \
                and all(n == 1 or a == b for n, a, b in zip(shape, layout[0], want)):
            found[i] = (base, steps)
    # what the caller gets: the copied values' own storage where a view replaces a copy
    held = [found[i][0] if i in found else v for i, v in enumerate(ret.operands)]
    done = 0
    for i, (base, steps) in found.items():
        if not all(_apart(base, w) for j, w in enumerate(held) if j != i):
            continue  # results that eager holds apart must not share elements (writes to one would show)
        view = base
        with ret.context, ret.location, ir.InsertionPoint(ret):
            for kind, op, *owner in steps:
                view = _as_view(view, op, owner[0]) if kind == "copy" else _reshape_like(op, view)
        old = ret.operands[i]
        ret.operands[i] = view  # a kernel reading the copy reads it through its map still
        _erase_unused(old)
        done += 1
    return done


def returned_values_as_views_of_their_copies(main) -> int:
    """A returned value that a copy permutes, where eager returns the value as that view of the
    copy's layout, is returned as a `linalg.transpose` of the copy; returns how many. SDPA writes
    its output (B, T, H, d) and returns its (B, H, T, d) transpose: a training forward saves both
    (the attention's backward reads O, the out-projection's weight gradient its input), and the
    value and its copy were each written (25 MB apiece for GPT-2 small's block at 8 x 1024
    tokens). Written once now, permuted. Only where eager's strides and offset are the view's
    exactly, and any other result sharing the copy's elements shares eager's storage as well."""
    if LAYOUTS not in main.attributes or STORAGES not in main.attributes:
        return 0
    block = main.regions[0].blocks[0]
    ret = list(block.operations)[-1]
    layouts = [list(ir.DenseI64ArrayAttr(a)) for a in ir.ArrayAttr(main.attributes[LAYOUTS])]
    groups = list(ir.DenseI64ArrayAttr(main.attributes[STORAGES]))
    if len(layouts) != len(ret.operands) or len(groups) != len(ret.operands):
        return 0
    done = 0
    for i, v in enumerate(list(ret.operands)):
        want = layouts[i]
        if not want or isinstance(v.owner, ir.Block) or pat.op_of(v.owner).name in _VIEWS:
            continue
        t = ir.RankedTensorType(v.type)
        if not t.has_static_shape or len(want) != t.rank + 1 or want[-1] != 0:
            continue
        for use in v.uses:
            c = pat.op_of(use.owner)
            owner = _view_map(c) if pat.is_generic(c) and len(c.results) == 1 else None
            if owner is None or sorted(k for k in owner if k is not None) != list(range(t.rank)) \
                    or len(owner) != t.rank or owner == list(range(t.rank)):
                continue  # only a permutation of all of v's dims
            cs = contiguous_strides(ir.RankedTensorType(c.results[0].type).shape)
            strides = [0] * t.rank
            for j, k in enumerate(owner):
                strides[k] = cs[j]
            if any(n != 1 and a != b for n, a, b in zip(t.shape, strides, want)):
                continue
            copy = c.results[0]
            if any(j != i and _storage(w) == copy and (groups[j] < 0 or groups[j] != groups[i])
                   for j, w in enumerate(ret.operands)):
                continue  # eager holds that result apart from this one
            with ret.context, ret.location, ir.InsertionPoint(ret):
                init = tensor.EmptyOp(list(t.shape), t.element_type).result
                view = linalg.transpose(copy, outs=[init], permutation=[owner.index(k) for k in range(t.rank)])
            ret.operands[i] = view.results[0]
            done += 1
            break
    return done


def _steps(v):
    """(the value v is copied from, [("copy", generic, its view map) or ("reshape", op), ...] from
    that value to v): v seen back through reshapes and copies that only move elements."""
    steps: list = []
    while not isinstance(v.owner, ir.Block):
        op = pat.op_of(v.owner)
        owner = _view_map(op) if pat.is_generic(op) and len(op.results) == 1 else None
        if op.name in ("tensor.expand_shape", "tensor.collapse_shape"):
            steps.insert(0, ("reshape", op))
        elif owner is not None:
            steps.insert(0, ("copy", op, owner))
        else:
            break
        v = op.operands[0]
    return v, steps


def _view_map(g) -> list | None:
    """For a generic copying its one input through a permutation of the loops (unit dims may be
    dropped or added): the input dim each result dim is, None for an added unit dim; else None.
    A copy in the same order is one too (after a transpose, dropping a unit dim)."""
    if not pat.is_data_movement(g):
        return None
    m_in, m_out = pat.indexing_maps(g)
    src, res = ir.RankedTensorType(pat.inputs(g)[0].type), ir.RankedTensorType(g.results[0].type)
    if not pat.is_identity_map(m_out) or src.element_type != res.element_type or not src.has_static_shape:
        return None
    owner: list = [None] * res.rank
    for k, e in enumerate(m_in.results):
        if isinstance(e, ir.AffineDimExpr) and owner[e.position] is None:
            owner[e.position] = k
        elif not (isinstance(e, ir.AffineConstantExpr) and e.value == 0 and src.shape[k] == 1):
            return None
    if any(k is None and n != 1 for k, n in zip(owner, res.shape)):
        return None  # a broadcast
    return owner if any(k is not None for k in owner) else None


def _as_view(src, g, owner: list):
    """g's result as views of src: its dropped unit dims collapsed, a linalg.transpose, the added
    unit dims expanded."""
    s = ir.RankedTensorType(src.type)
    kept = sorted(k for k in owner if k is not None)
    v = src
    if len(kept) < s.rank:
        groups = [[k] for k in kept]
        for k in range(s.rank):  # a dropped unit dim joins the kept dim after it (or the last)
            if k not in kept:
                nxt = next((j for j, kk in enumerate(kept) if kk > k), len(kept) - 1)
                groups[nxt].append(k)
        t = ir.RankedTensorType.get([s.shape[k] for k in kept], s.element_type)
        v = tensor.CollapseShapeOp(t, v, reassociation_attr([sorted(grp) for grp in groups])).result
    order = [kept.index(k) for k in owner if k is not None]
    if order != sorted(order):
        init = tensor.EmptyOp([s.shape[kept[a]] for a in order], s.element_type).result
        v = linalg.transpose(v, outs=[init], permutation=order).results[0]
    res = ir.RankedTensorType(g.results[0].type)
    if len(owner) > len(order):
        covered = [j for j, k in enumerate(owner) if k is not None]
        groups = [[j] for j in covered]
        for j in range(len(owner)):
            if owner[j] is None:
                nxt = next((a for a, c in enumerate(covered) if c > j), len(covered) - 1)
                groups[nxt].append(j)
        v = tensor.ExpandShapeOp(res, v, reassociation_attr([sorted(grp) for grp in groups]), [],
                                 list(res.shape)).result
    return v


def _reshape_like(op, v):
    t = op.results[0].type
    if op.name == "tensor.collapse_shape":
        return tensor.CollapseShapeOp(t, v, op.attributes["reassociation"]).result
    return tensor.ExpandShapeOp(t, v, op.attributes["reassociation"], [], list(ir.RankedTensorType(t).shape)).result


def _erase_unused(v) -> None:
    """The copies and reshapes the return read, where nothing else reads them now."""
    while not isinstance(v.owner, ir.Block) and not list(v.uses):
        op = pat.op_of(v.owner)
        if op.name not in ("tensor.expand_shape", "tensor.collapse_shape") and not pat.is_generic(op):
            return
        nxt = op.operands[0]
        op.erase()
        v = nxt


def _reshaped(op, layout) -> tuple[list[int], int] | None:
    """(strides, offset) after reshape `op` of a tensor laid out as `layout`; None where the
    reshape merges dims that do not step over each other (torch would copy)."""
    strides, offset = layout
    groups = reassociation_groups(op)
    if op.name == "tensor.expand_shape":
        return split_strides(groups, strides, ir.RankedTensorType(op.results[0].type).shape), offset
    merged = merge_strides(groups, strides, ir.RankedTensorType(op.operands[0].type).shape)
    return (merged, offset) if merged is not None else None


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
    if op.name in ("tensor.expand_shape", "tensor.collapse_shape"):
        base = _layout(op.operands[0])
        return _reshaped(op, base) if base is not None else None
    if op.name in ("arith.constant", "tensor.empty") or op.name.startswith("tensor."):
        return None
    return contiguous_strides(t.shape), 0
