"""Fusion groups as uniorch-fuse leaves them in the IR (`uniorch.group`, `uniorch.kind` and
`uniorch.domain` on the ops), read and rewritten by the passes that merge groups after it:
uniorch-fuse-row-stats, uniorch-fuse-attention and uniorch-fuse-chain."""
from __future__ import annotations

from torch_mlir import ir

from uniorch.codegen import patterns as pat

from .fuse_common import DOMAIN, GROUP, KIND


def _i64(v: int):
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


def group_of(op) -> int | None:
    op = pat.op_of(op)
    return ir.IntegerAttr(op.attributes[GROUP]).value if GROUP in op.attributes else None


def kind_of(op) -> str | None:
    return ir.StringAttr(op.attributes[KIND]).value if KIND in op.attributes else None


def members(block) -> dict[int, list]:
    """Group number -> its top-level ops, in block order."""
    out: dict[int, list] = {}
    for o in block.operations:
        g = group_of(o.operation)
        if g is not None:
            out.setdefault(g, []).append(o.operation)
    return out


def top_level(op):
    """The op of the function body that `op` is nested in (itself if it is one)."""
    while op.parent is not None and op.parent.name != "func.func":
        op = pat.op_of(op.parent)
    return op


def join(op, gid: int) -> None:
    """`op` becomes a member of group `gid` (a member, not its anchor: no kind or domain)."""
    op.attributes[GROUP] = _i64(gid)
    for a in (KIND, DOMAIN):
        if a in op.attributes:
            del op.attributes[a]


def extend_domain(anchor, first) -> None:
    """The merged anchor's domain also reduces over the loops `first` (the contraction before it
    in a flash or chain kernel) reduces: `{parallel, reduction = anchor's + first's}`."""
    dom = ir.DictAttr(anchor.attributes[DOMAIN])
    inner = [s for s, it in zip(pat.loop_sizes(first), pat.iterator_types(first)) if it == "reduction"]
    keys = list(ir.ArrayAttr(dom["reduction"]))  # sizes, symbolic ones as their text (uniorch/ir/dims.py)
    anchor.attributes[DOMAIN] = ir.DictAttr.get({
        "parallel": dom["parallel"],
        "reduction": ir.ArrayAttr.get(keys + [_i64(s) if isinstance(s, int) else ir.StringAttr.get(str(s))
                                              for s in inner]),
    })


def merge_into_contractions(block, try_merge) -> None:
    """`try_merge(block, c, groups)` for each contraction anchoring a group of kind "contraction"
    (it merges another group into c's, or returns False), `groups` being `members(block)` as it is
    then; group numbers dense again if any did. A call must not change `groups`, and one that
    returns False must have changed nothing: the members are read again only after a True (read
    per contraction, they were quadratic in a model's layers)."""
    merged = False
    now = members(block)
    for c in [o.operation for o in block.operations]:
        if kind_of(c) == "contraction" and pat.is_contraction(c) and try_merge(block, c, now):
            merged = True
            now = members(block)
    if merged:
        renumber(block)


def merge_each_group(block, try_group) -> None:
    """`try_group(members, gid)` for each group in turn (members as they are by then: earlier
    calls may have merged it away); group numbers dense again if any returned True. A call that
    returns False must have changed nothing: the members are read again only after a True (once
    per group, they were quadratic in a model's layers)."""
    changed = False
    now = members(block)
    for gid in sorted(now):
        if gid in now and try_group(now, gid):
            changed = True
            now = members(block)
    if changed:
        renumber(block)


def renumber(block) -> None:
    """Group numbers dense again, in order of each group's first op."""
    first: dict[int, int] = {}
    for i, o in enumerate(block.operations):
        g = group_of(o.operation)
        if g is not None and g not in first:
            first[g] = i
    new = {g: n for n, g in enumerate(sorted(first, key=first.get))}
    for o in block.operations:
        g = group_of(o.operation)
        if g is not None:
            o.operation.attributes[GROUP] = _i64(new[g])
