"""Reshapes of symbolic sizes that undo one another, removed (part of `uniorch-preprocess`).

torch-mlir lowers a view that splits a symbolic dim (SDPA's `[b * h, t, t] -> [b, h, t, t]` after
its batched matmul) as `tensor.reshape` to a shape built from elements, and merging views as
`tensor.collapse_shape`. With static sizes upstream canonicalisation folds such a pair; with
symbolic ones it cannot prove the sizes agree. uniorch/ir/dims.py can: a `tensor.reshape` or
`expand_shape` whose result has the dims of the tensor a chain of reshapes started from is that
tensor, so the batched matmul's 4-d result reaches the softmax directly and attention fuses. A
reshape whose dims merge contiguous dims of a tensor earlier in its chain is a `collapse_shape` of
that tensor (GQA's scores `[b, g, r, t, t] -> [b * g * r, t, t] -> [b, g * r, t, t]` are one merge of
the head dims), which the attention fusion and its codegen follow.
"""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith, tensor

from uniorch.ir import dims

from .ir_utils import reassociation_attr as _reassociation

RESHAPES = ("tensor.reshape", "tensor.expand_shape", "tensor.collapse_shape")


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(dims.is_static(x) == dims.is_static(y) and (x == y if dims.is_static(x)
                                                                                    else dims.prod([x]) == dims.prod([y]))
                                    for x, y in zip(a, b))


def fold_symbolic_reshapes(func_op: ir.Operation, merges: bool = True) -> int:
    """Replaces each reshape that restores an earlier tensor's dims by that tensor, and (`merges`)
    each that merges or splits dims by that view; returns how many. Before upstream elementwise
    fusion, merges stay: its reshape propagation would move a merge past the ops after it (GQA's
    mask and softmax end up split across the heads' two dims)."""
    if not dims.has_symbols(func_op):
        return 0
    done = 0
    for op in [o.operation for o in func_op.regions[0].blocks[0].operations]:
        if op.name not in ("tensor.reshape", "tensor.expand_shape") or not list(op.results[0].uses):
            continue
        try:
            want = dims.shape(op.results[0])
        except dims.UnknownSize:
            continue
        src = op.operands[0]
        folded = False
        while not isinstance(src.owner, ir.Block) and src.owner.name in RESHAPES:
            src = src.owner.operands[0]
            try:
                have = dims.shape(src)
            except dims.UnknownSize:
                break
            if src.type == op.results[0].type and _same(have, want):
                op.results[0].replace_all_uses_with(src)
                _erase_unused(op)
                folded = True
                break
            groups = _merges(have, want) if merges else None
            with op.location:
                merge = groups is not None and _collapsed_type(src, have, groups) == op.results[0].type
            if merge:
                with ir.InsertionPoint(op), op.location:
                    merged = tensor.collapse_shape(op.results[0].type, src, _reassociation(groups))
                op.results[0].replace_all_uses_with(merged)
                _erase_unused(op)
                folded = True
                break
        if folded or (merges and _as_split(op, want)):
            done += 1
    return done


def _as_split(op, want: list) -> bool:
    """A `tensor.reshape` to a shape built from elements whose dims split its operand's dims
    (`[b * t, 32] -> [b, t, 4, 8]`) becomes that `expand_shape`, sized by the same elements."""
    shape = op.operands[1] if op.name == "tensor.reshape" else None
    if shape is None or isinstance(shape.owner, ir.Block) or shape.owner.name != "tensor.from_elements":
        return False
    try:
        have = dims.shape(op.operands[0])
    except dims.UnknownSize:
        return False
    groups = _merges(want, have)
    if groups is None or any(not list(g) for g in groups):
        return False
    dyn = ir.ShapedType.get_dynamic_size()
    result = ir.RankedTensorType(op.results[0].type)
    if [dyn if not dims.is_static(w) else int(w) for w in want] != list(result.shape):
        return False
    elements = list(shape.owner.operands)
    with ir.InsertionPoint(op), op.location:
        index = ir.IndexType.get()
        sizes = [arith.index_cast(index, elements[i]) for i, w in enumerate(want) if not dims.is_static(w)]
        split = tensor.expand_shape(result, op.operands[0], _reassociation(groups), sizes,
                                    [int(w) if dims.is_static(w) else dyn for w in want])
    op.results[0].replace_all_uses_with(split)
    _erase_unused(op)
    return True


def _merges(have: list, want: list):
    """Contiguous groups of `have`'s dims whose products are `want`'s dims, or None."""
    groups, i = [], 0
    for w in want:
        g, p = [], 1
        while i < len(have):
            g.append(i)
            p = dims.prod([p, have[i]])
            i += 1
            if dims.same(p, w):
                break
        if not g or not dims.same(p, w):
            return None
        groups.append(g)
    while groups and i < len(have) and have[i] == 1:
        groups[-1].append(i)
        i += 1
    return groups if i == len(have) and any(len(g) > 1 for g in groups) else None


def _collapsed_type(src, have: list, groups: list):
    ranked = ir.RankedTensorType(src.type)
    sizes = [dims.prod([have[d] for d in g]) if all(dims.is_static(have[d]) for d in g) else ir.ShapedType.get_dynamic_size()
             for g in groups]
    return ir.RankedTensorType.get([int(s) for s in sizes], ranked.element_type, ranked.encoding)


def _erase_unused(op) -> None:
    """The reshape and the chain of reshapes (and their size operands' producers) it read, once unused."""
    while op is not None and op.name in RESHAPES + ("tensor.from_elements",) and not any(
            list(r.uses) for r in op.results):
        feeds = [v.owner for v in op.operands if not isinstance(v.owner, ir.Block)]
        op.erase()
        op = next((f.operation for f in feeds if f.name in RESHAPES or f.name == "tensor.from_elements"), None)
