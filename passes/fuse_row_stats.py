"""uniorch-fuse-row-stats: a norm's per-row statistics computed in the matmul that normalises with
them, when the row is one tile of that matmul's reduction dim.

After uniorch-fuse a LayerNorm or RMSNorm before a linear layer is two kernels: a reduction kernel
reads the activation and writes per-row statistics (mean, sums of the centred values and their
squares: `tools/kernel_report` counts them), and the matmul computes the normalise in its A tiles
from the activation and those statistics (passes/fuse_factors.py, the prologue). Where the rows
are at most `ROW_STATS_MAX` long, the matmul loads each row whole in one tile of its K loop, so
it can reduce the statistics from the tile it loaded anyway: the statistics kernel, its read of
the activation and its writes go. Every matmul whose prologue reads the statistics (a pre-norm
read by separate q, k and v projections) gets its own copy of the reduction ops, marked
`uniorch.row_stat`; codegen (codegen/contraction_emit.py) reduces them along the A tile's K axis
and its schedule keeps K in one tile.

A norm after a linear layer (post-norm) joins that layer's kernel as its epilogue instead
(`_try_epilogue`): the output tile holds the row, the statistics are summed over its N axis.

Only statistics groups qualify: every reduction sums (`arith.addf`) one tensor over its innermost
dim, and every value the group sends out is read by pointwise prologue ops on the A side of
contractions whose one reduction dim has the row's length. Anything else (statistics also
returned or saved for a backward, a normalised activation written, a longer row) stays as it was.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from uniorch.codegen import patterns as pat
from uniorch.codegen.attention_plan import _plan

from .base import Pass, PassContext
from .fuse_common import TILE_STAT
from .fuse_factors import _numel as numel
from .groups import group_of, join, kind_of, merge_each_group, top_level
from .ir_utils import main_func

ROW_STAT = "uniorch.row_stat"
# The row is one K tile: a 128-wide fp32 tile is 64 KB of A and B per pipeline stage at the
# schedule's 64x64 output tile, which contraction_schedule halves as K grows.
ROW_STATS_MAX = 128


@dataclass(frozen=True)
class FuseRowStats(Pass):
    name = "uniorch-fuse-row-stats"
    summary = "compute a norm's per-row statistics in the matmuls that normalise with them"

    def run(self, module, pctx: PassContext) -> None:
        main = main_func(module)
        with module.context:
            block = main.regions[0].blocks[0]
            merge_each_group(block, lambda members, gid: _try(block, members, gid))


def _row_sum(op) -> int | None:
    """The row length if `op` sums one tensor over its innermost loop (a statistic per row)."""
    if not pat.is_generic(op) or pat.num_inputs(op) != 1 or len(op.results) != 1:
        return None
    its = pat.iterator_types(op)
    if its.count("reduction") != 1 or its[-1] != "reduction":
        return None
    combs = pat.reduction_combiners(op)
    if not combs or any(c != "arith.addf" for c, _ in combs):
        return None
    maps = pat.indexing_maps(op)
    if maps[0] != ir.AffineMap.get_identity(len(its)):
        return None  # the input read in loop order: the row along the innermost dim
    if len(its) - 1 in pat.map_dims(maps[1]):
        return None
    row = pat.loop_sizes(op)[-1]
    return row if isinstance(row, int) else None


def _a_side(anchor, ops: list) -> tuple[set, set]:
    """Ops of `ops` (a contraction's group) that the contraction's A and B factors are computed
    from, walking producers inside the group."""
    p = _plan(anchor)
    maps = pat.indexing_maps(anchor)
    m_dims = set(p.order["m"])
    inside = {o for o in ops}

    def reach(v) -> set:
        seen, stack = set(), [v]
        while stack:
            w = stack.pop()
            if isinstance(w.owner, ir.Block):
                continue
            o = pat.op_of(w.owner)
            if o not in inside or o in seen:
                continue
            seen.add(o)
            stack.extend(o.operands)
        return seen

    a, b = set(), set()
    for i in range(pat.num_inputs(anchor)):
        side = reach(anchor.operands[i])
        if m_dims and m_dims <= set(pat.map_dims(maps[i])):
            a |= side
        else:
            b |= side
    return a, b


def _stats_row(s_ops: list) -> int | None:
    """The row length if every reduction of a reduction group is a row sum of that length (at
    most ROW_STATS_MAX) and the rest is pointwise or fills."""
    if not any(kind_of(o) == "reduction" for o in s_ops):
        return None
    rows = set()
    for o in s_ops:
        if not (pat.is_generic(o) or o.name == "linalg.fill"):
            return None
        if pat.is_generic(o) and "reduction" in pat.iterator_types(o):
            row = _row_sum(o)
            if row is None:
                return None
            rows.add(row)
        elif pat.is_generic(o) and not pat.is_pointwise(o):
            return None
    if len(rows) != 1:
        return None
    row = rows.pop()
    return row if row <= ROW_STATS_MAX else None


def _try(block, members: dict, gid: int) -> bool:
    s_ops = members[gid]
    row = _stats_row(s_ops)
    if row is None:
        return False
    readers = _prologue_readers(members, gid, row)
    if readers is None:
        return _try_epilogue(members, gid, row)
    for g in readers:
        _clone_into(s_ops, members[g], g)
    for o in reversed(s_ops):
        if all(not list(r.uses) for r in o.results):
            o.erase()
    return True


def _prologue_readers(members: dict, gid: int, row: int) -> dict | None:
    """The groups reading the statistics, if each is a contraction whose K is the row and whose A
    side alone reads them (through pointwise prologue ops); else None."""
    s_ops = members[gid]
    s_set = set(s_ops)
    readers: dict[int, list] = {}
    for o in s_ops:
        for r in o.results:
            for u in r.uses:
                user = top_level(pat.op_of(u.owner))
                if user in s_set:
                    continue
                g = group_of(user)
                if g is None or not pat.is_pointwise(user):
                    return None
                readers.setdefault(g, []).append(user)
    for g, users in readers.items():
        anchors = [o for o in members[g] if kind_of(o) == "contraction" and pat.is_contraction(o)]
        if len(anchors) != 1:
            return None
        p = _plan(anchors[0])
        if len(p.order["k"]) != 1 or p.K != row or len(p.order["m"]) == 0:
            return None
        a_ops, b_ops = _a_side(anchors[0], members[g])
        if any(u not in a_ops or u in b_ops for u in users):
            return None
    return readers or None


def _try_epilogue(members: dict, gid: int, row: int) -> bool:
    """The norm after a linear layer (post-norm: BERT's `LayerNorm(x + proj(h))`): statistics and
    normalise join the layer's kernel as its epilogue when its output tile holds the whole row
    (one tile of N: codegen keeps it so), and the sum before the norm is not written. Only when
    everything else the norm reads is a function argument (its weight and bias), so no other
    kernel sits between the two, and what the group sends out is full rows (not statistics)."""
    s_ops = members[gid]
    s_set = set(s_ops)
    sources = set()
    for o in s_ops:
        for v in list(o.operands)[:pat.num_inputs(o)] if pat.is_generic(o) else []:
            if isinstance(v.owner, ir.Block) or not isinstance(v.type, ir.ShapedType):
                continue
            p = top_level(pat.op_of(v.owner))
            if p in s_set or p.name == "arith.constant":
                continue
            g = group_of(p)
            if g is None:
                return False
            sources.add(g)
    if len(sources) != 1:
        return False
    g = sources.pop()
    anchors = [o for o in members[g] if kind_of(o) == "contraction" and pat.is_contraction(o)
               and not pat.is_convolution(o)]
    if len(anchors) != 1 or any(TILE_STAT in o.attributes for o in members[g]):
        return False  # (tile statistics already chunk its rows: passes/tile_stats.py)
    p = _plan(anchors[0])
    if len(p.order["n"]) != 1 or p.N != row or p.window is not None:
        return False
    full = numel(anchors[0].results[0].type)
    for o in s_ops:
        for r in o.results:
            if any(top_level(pat.op_of(u.owner)) not in s_set for u in r.uses) and numel(r.type) != full:
                return False  # statistics used outside (saved for a backward): not one store per row
    for o in s_ops:
        _join_stat(o, g)
    return True


def _join_stat(op, gid: int) -> None:
    join(op, gid)
    if pat.is_generic(op) and "reduction" in pat.iterator_types(op):
        op.attributes[ROW_STAT] = ir.UnitAttr.get()


def _clone_into(s_ops: list, g_ops: list, gid: int) -> None:
    """Copies of the statistics ops in group `gid`, read by its ops instead of the originals."""
    mapping: list = []  # (original result, clone result)
    for o in s_ops:
        with ir.InsertionPoint(o):
            c = pat.op_of(o.clone())
        for i, v in enumerate(c.operands):
            for old, new in mapping:
                if v == old:
                    c.operands[i] = new
        mapping.extend(zip(o.results, c.results))
        _join_stat(c, gid)
    g_set = set(g_ops)
    # decided before any operand changes: an op whose operands were set compares unequal to the
    # handles taken before (the bindings' live-operation map)
    moves = [(pat.op_of(u.owner), u.operand_number, new) for old, new in mapping for u in old.uses
             if top_level(pat.op_of(u.owner)) in g_set]
    for user, i, new in moves:
        user.operands[i] = new


__all__ = ["FuseRowStats", "ROW_STAT", "ROW_STATS_MAX"]
