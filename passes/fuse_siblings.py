"""uniorch-fuse-siblings: matmuls of the same input are one kernel (horizontal fusion).

A transformer's separate q, k and v projections (BERT, ViT, T5, Llama) read the same activation
(as do an Inception block's 1x1 convolutions) and are three kernels: each loads the activation's tiles, and each is a launch. Where contraction
groups have the same first factor (the same tensor, read through the same map) and the same
loops, sizes and indexing, the later ones join the first's group as its siblings: one kernel whose
programs load each tile of the shared factor once and feed it to every sibling's `tl.dot`, one
accumulator each, each with its own second factor, epilogue and stores
(codegen/contraction_emit.py). The sibling's anchor keeps its op and is marked `uniorch.sibling`.

Only plain contraction groups merge: no prologue computing the shared factor (each group would
hold its own copy of it), no row statistics or pooling, and no path from one group to the other
(the merged kernel would wait on itself). At most `MAX_SIBLINGS` products share a kernel, each at
most `MAX_SIBLING_N` output columns per row tile, so the accumulators stay in registers.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from uniorch.codegen import patterns as pat
from uniorch.codegen.contraction_plan import SIBLING, same_factor

from .base import Pass, PassContext
from .fuse_row_stats import ROW_STAT
from .groups import group_of, join, kind_of, members, renumber, top_level
from .ir_utils import main_func
from .ir_utils import producer as _producer

MAX_SIBLINGS = 4
MAX_SIBLING_N = 256


@dataclass(frozen=True)
class FuseSiblings(Pass):
    name = "uniorch-fuse-siblings"
    summary = "merge contraction groups sharing their first factor into one kernel (q, k, v projections)"

    def run(self, module, pctx: PassContext) -> None:
        main = main_func(module)
        block = main.regions[0].blocks[0]
        with module.context:
            merged = False
            anchors = [o.operation for o in block.operations if kind_of(o.operation) == "contraction"
                       and (pat.is_contraction(o.operation) or pat.is_convolution(o.operation))]
            taken: set = set()
            # merging changes only the groups it takes, which are not looked at again
            plain = [_plain(block, c) for c in anchors]
            for i, c0 in enumerate(anchors):
                if i in taken or not plain[i]:
                    continue
                n = 1
                for j in range(i + 1, len(anchors)):
                    if n >= MAX_SIBLINGS:
                        break
                    c1 = anchors[j]
                    if j in taken or not plain[j] or not _same_shape(c0, c1):
                        continue
                    g0, g1 = group_of(c0), group_of(c1)
                    if _reaches(block, g0, g1) or _reaches(block, g1, g0):
                        continue
                    for o in members(block)[g1]:
                        join(o, g0)
                    c1.attributes[SIBLING] = ir.UnitAttr.get()
                    taken.add(j)
                    n += 1
                    merged = True
            if merged:
                renumber(block)


def _plain(block, c) -> bool:
    """c's group: a contraction reading its first factor from memory (no prologue computes it),
    no row statistics, no pooling, no other reduction, and few enough output columns."""
    gid = group_of(c)
    ops = members(block)[gid]
    if SIBLING in c.attributes or any(SIBLING in o.attributes for o in ops):
        return False
    p = _producer(c.operands[0])
    if p is not None and group_of(p) == gid and not (pat.is_cast_only(p, "arith.extf") and _outside(p, gid)):
        return False  # a prologue computes it (a 16-bit input widened on load is the same in each)
    for o in ops:
        if o != c and pat.is_generic(o) and ("reduction" in pat.iterator_types(o) or ROW_STAT in o.attributes):
            return False
    n = 1
    out_dims = pat.map_dims(pat.indexing_maps(c)[-1])
    a_dims = pat.map_dims(pat.indexing_maps(c)[0])
    for d, (it, size) in enumerate(zip(pat.iterator_types(c), pat.loop_sizes(c))):
        if it == "parallel" and d in out_dims and d not in a_dims:
            if not isinstance(size, int):
                return False
            n *= size
    return n <= MAX_SIBLING_N


def _outside(op, gid: int) -> bool:
    p = _producer(op.operands[0])
    return p is None or group_of(p) != gid


def _same_shape(c0, c1) -> bool:
    """The same first factor through the same map, and the same loops, sizes, maps and types."""
    return (same_factor(c0.operands[0], c1.operands[0])
            and pat.iterator_types(c0) == pat.iterator_types(c1) and pat.loop_sizes(c0) == pat.loop_sizes(c1)
            and [str(m) for m in pat.indexing_maps(c0)] == [str(m) for m in pat.indexing_maps(c1)]
            and str(c0.results[0].type) == str(c1.results[0].type)
            and str(c0.operands[1].type).split("x")[-1] == str(c1.operands[1].type).split("x")[-1])


def _reaches(block, src: int, dst: int) -> bool:
    """Whether a value of group `src` reaches group `dst` (through any ops and groups)."""
    groups = members(block)
    stack = list(groups[src])
    seen: list = []
    while stack:
        op = stack.pop()
        if any(op == s for s in seen):
            continue
        seen.append(op)
        for r in op.results:
            for u in r.uses:
                t = top_level(pat.op_of(u.owner))
                g = group_of(t)
                if g == dst:
                    return True
                if g is not None and g != src:
                    stack.extend(groups[g])
                elif g is None:
                    stack.append(t)
    return False


__all__ = ["FuseSiblings", "SIBLING", "MAX_SIBLINGS", "MAX_SIBLING_N"]
