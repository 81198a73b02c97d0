"""uniorch-fuse-siblings: matmuls of the same input are one kernel (horizontal fusion).

A transformer's separate q, k and v projections (BERT, ViT, T5, Llama) read the same activation
(as do an Inception block's 1x1 convolutions) and are three kernels: each loads the activation's tiles, and each is a launch. Where contraction
groups have the same first factor (the same tensor, read through the same map) and the same
loops, sizes and indexing, the later ones join the first's group as its siblings: one kernel whose
programs load each tile of the shared factor once and feed it to every sibling's `tl.dot`, one
accumulator each, each with its own second factor, epilogue and stores
(codegen/contraction_emit.py). The sibling's anchor keeps its op and is marked `uniorch.sibling`.

Plain contraction groups merge: no prologue computing the shared factor, no row statistics or
pooling, and no path from one group to the other (the merged kernel would wait on itself). Groups
whose first factor a prologue computes merge too when the prologues are the same ops on the same
tensors: fusion clones a pre-norm (LayerNorm, RMSNorm, with its row statistics) into each of q, k
and v; the later products then read the first one's normalised tile, their copies are erased, and
the kernel computes the statistics once (ViT, Llama, T5). At most `MAX_SIBLINGS` products share a kernel, each at
most `MAX_SIBLING_N` output columns per row tile, so the accumulators stay in registers.

A gated MLP's gate and up projections (`_merge_gated`) are a pair whose one group's epilogue reads
the other's result, element by element where its own accumulator sits: silu(x @ Wg) * (x @ Wu).
They merge anyway, at any width (the two accumulators share each N tile), and the epilogue reads
the sibling's accumulator: the up projection's output is neither written nor read back (Llama
at 512 x 1408: 3 -> 2 MLP kernels, 11.4 -> 10.1 MB; on sm_90 in bf16 at the benchmark's 4096 x
11008, 201 registers at 128 x 128 tiles, no spill with Triton 3.6's ptxas).
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
            groups = members(block)
            # block positions and each anchor's prologue, made once (each was a walk of the whole
            # block per pair of anchors: most of RegNet's compile); a merge updates what it changes
            at = _positions(block)
            prologues: dict = {}

            def prologue(k: int) -> tuple:
                """(anchor k's prologue, the values from outside its group that it reads)."""
                if k not in prologues:
                    ops = _prologue(anchors[k], at)
                    inside = {o.operation for o in ops}
                    prologues[k] = (ops, {v for o in ops for v in o.operands
                                          if isinstance(v.owner, ir.Block) or _producer(v) is None
                                          or top_level(_producer(v)).operation not in inside})
                return prologues[k]

            plain = [_plain(block, c, groups=groups) for c in anchors]
            shared = [_plain(block, c, prologue=True, groups=groups, at=at) for c in anchors]
            # what `_same_shape` compares but the factor, as a key: pairs of a deep model's
            # anchors are compared by it first (each comparison was a few maps printed)
            sig = [_signature(c) if plain[k] or shared[k] else None for k, c in enumerate(anchors)]
            for i, c0 in enumerate(anchors):
                if i in taken or not (plain[i] or shared[i]):
                    continue
                n = 1
                for j in range(i + 1, len(anchors)):
                    if n >= MAX_SIBLINGS:
                        break
                    c1 = anchors[j]
                    if j in taken or sig[j] != sig[i]:
                        continue
                    g0, g1 = group_of(c0), group_of(c1)
                    if plain[i] and plain[j]:
                        if not same_factor(c0.operands[0], c1.operands[0]):
                            continue
                    # equal prologues read the same tensors (the cheap test first: they are a
                    # model's layers' norms, compared op by op)
                    elif not (shared[i] and shared[j] and prologue(i)[1] == prologue(j)[1]
                              and _same_prologue(c0, c1, prologue(i)[0], prologue(j)[0], at)):
                        continue
                    if _reaches(groups, g0, g1, at) or _reaches(groups, g1, g0, at):
                        continue
                    if c0.operands[0] != c1.operands[0]:  # one prologue feeds both products
                        dead = prologue(j)[0]
                        pos = at.pop(c1)  # an op's hash changes with its operands
                        c1.operands[0] = c0.operands[0]
                        at[c1] = pos
                        for o in reversed(dead):
                            if not any(list(r.uses) for r in o.results):
                                groups[g1] = [m for m in groups[g1] if m != o.operation]
                                at.pop(o.operation)
                                o.erase()
                    for o in groups[g1]:
                        join(o, g0)
                    groups[g0] = groups[g0] + groups.pop(g1)
                    for k in [k for k in prologues if group_of(anchors[k]) == g0]:
                        del prologues[k]  # its group grew
                    c1.attributes[SIBLING] = ir.UnitAttr.get()
                    taken.add(j)
                    n += 1
                    merged = True
            merged |= _merge_gated(block, anchors, taken)
            if merged:
                renumber(block)


def _merge_gated(block, anchors: list, taken: set) -> bool:
    """Pairs of products of one input where one's epilogue reads the other's result (a gated MLP,
    silu(x @ Wg) * (x @ Wu): SwiGLU, GeGLU) become one kernel with an accumulator each: the epilogue
    reads the sibling's accumulator, and the up projection's output is never written. Any width:
    the two share each N tile."""
    merged = False
    # both read x from memory (a norm before them is a kernel of its own at these widths: an MLP
    # narrow enough for a row-statistics prologue is one chain kernel anyway); a merged group is
    # not looked at again, so each group's answer holds for the whole loop
    groups = members(block)
    at = _positions(block)
    plain = [i not in taken and _plain(block, c, wide=True, groups=groups) for i, c in enumerate(anchors)]
    for i, c0 in enumerate(anchors):
        for j, c1 in enumerate(anchors):
            if i == j or i in taken or j in taken or not (plain[i] and plain[j]) or not _same_shape(c0, c1):
                continue
            g0, g1 = group_of(c0), group_of(c1)
            if not _gates(c0, c1, at, groups) or _reaches(groups, g0, g1, at):
                continue
            for o in groups[g1]:
                join(o, g0)
            groups[g0] = groups[g0] + groups.pop(g1)
            c1.attributes[SIBLING] = ir.UnitAttr.get()
            taken.update((i, j))
            merged = True
    return merged


def _gates(c0, c1, at: dict, groups: dict) -> bool:
    """c0's epilogue reads c1's result where c0's accumulator holds the same element (a pointwise
    op of c0's group after c0, through identity maps), and nothing else of c1's group leads into
    c0's group."""
    g0, g1 = group_of(c0), group_of(c1)
    if not any(group_of(top_level(pat.op_of(u.owner))) == g0 for o in groups[g1] for r in o.results for u in r.uses):
        return False  # the usual answer, found without the walks below (every pair of a model's MLPs)
    ready, own = _epilogue_values(groups, c1, at), _epilogue_values(groups, c0, at)
    before = {o for o in _prologue(c0, at)}
    direct, others = False, []
    for o in groups[g1]:
        for r in o.results:
            for u in r.uses:
                t = top_level(pat.op_of(u.owner))
                if group_of(t) == g1:
                    continue
                if group_of(t) != g0:
                    others.append(t)
                    continue
                if pat.op_of(u.owner) != t:  # read inside a body (a gather): not where it is computed
                    return False
                if r not in ready or not _pointwise_read(t, u.operand_number, c0) or t in before or at[t] < at[c0]:
                    return False
                # and where c0's accumulator holds the same element: what it reads of c0's group is
                # c0's result element by element (not transposed: another position of the tile)
                if any(not isinstance(v.owner, ir.Block) and group_of(top_level(pat.op_of(v.owner))) == g0
                       and (v not in own or not _pointwise_read(t, k, c0)) for k, v in enumerate(t.operands)
                       if k < pat.num_inputs(t)):
                    return False
                direct = True
    return direct and not any(_leads_to(t, g0, groups, at) for t in others)


def _epilogue_values(groups: dict, c, at: dict) -> set:
    """c's result and what pointwise ops of its group compute from it element by element (its
    cast to bf16, a bias added): the values its accumulator gives where it sits."""
    ready = {c.results[0]}
    start = at[c.operation]
    for o in sorted(groups[group_of(c)], key=lambda o: at[o.operation]):
        if at[o.operation] > start and any(v in ready for v in o.operands) and all(
                _pointwise_read(o, k, c) for k, v in enumerate(o.operands) if v in ready):
            ready.add(o.results[0])
    return ready


def _pointwise_read(op, operand: int, c) -> bool:
    """op is a parallel generic over c's output shape reading operand `operand` as it writes."""
    if not pat.is_generic(op) or "reduction" in pat.iterator_types(op) or len(op.results) != 1:
        return False
    maps = pat.indexing_maps(op)
    shape = lambda v: ir.RankedTensorType(v.type).shape  # noqa: E731 - the element type may differ (a cast)
    return (shape(op.results[0]) == shape(c.results[0]) and operand < pat.num_inputs(op)
            and maps[operand] == maps[-1] and maps[-1] == ir.AffineMap.get_identity(maps[-1].n_dims))


def _leads_to(op, dst: int, groups: dict, at: dict) -> bool:
    """Whether op's results reach group `dst`."""
    g = group_of(op)
    if g is not None:
        return _reaches(groups, g, dst, at)
    stack, seen = [op], set()
    while stack:
        o = stack.pop()
        if o.operation in seen:
            continue
        seen.add(o.operation)
        for r in o.results:
            for u in r.uses:
                t = top_level(pat.op_of(u.owner))
                if group_of(t) == dst:
                    return True
                if group_of(t) is not None and _reaches(groups, group_of(t), dst, at):
                    return True
                stack.append(t)
    return False


def _plain(block, c, prologue: bool = False, wide: bool = False, groups: dict | None = None,
           at: dict | None = None) -> bool:
    """c's group: a contraction reading its first factor from memory (no prologue computes it),
    no row statistics, no pooling, no other reduction, and few enough output columns (any number
    if `wide`: two products tiled along N together). With `prologue`: a prologue may compute the
    first factor, with row statistics (LayerNorm), when nothing else in the group reduces (pre-norm
    q, k and v: `_same_prologue` decides). `groups`: `members(block)`, read once by a caller
    asking for many products. `at`: `_positions(block)`, likewise (needed with `prologue`)."""
    gid = group_of(c)
    ops = (groups if groups is not None else members(block))[gid]
    if SIBLING in c.attributes or any(SIBLING in o.attributes for o in ops):
        return False
    p = _producer(c.operands[0])
    computed = p is not None and group_of(p) == gid and not (pat.is_cast_only(p, "arith.extf") and _outside(p, gid))
    if computed != prologue:
        return False  # a prologue computes it (a 16-bit input widened on load is the same in each)
    before = _prologue(c, at if at is not None else _positions(block)) if prologue else []
    for o in ops:
        if o == c or not pat.is_generic(o):
            continue
        if ROW_STAT in o.attributes and any(o == b for b in before):
            continue  # the prologue's statistics: computed from the shared A tile
        if "reduction" in pat.iterator_types(o) or ROW_STAT in o.attributes:
            return False
    n = 1
    out_dims = pat.map_dims(pat.indexing_maps(c)[-1])
    a_dims = pat.map_dims(pat.indexing_maps(c)[0])
    for d, (it, size) in enumerate(zip(pat.iterator_types(c), pat.loop_sizes(c))):
        if it == "parallel" and d in out_dims and d not in a_dims:
            if not isinstance(size, int):
                return False
            n *= size
    return wide or n <= MAX_SIBLING_N


def _positions(block) -> dict:
    """Each top-level op's place in the block (keyed by Operation)."""
    return {o.operation: i for i, o in enumerate(block.operations)}


def _prologue(c, at: dict) -> list:
    """The ops of c's group that its first factor is computed from, in block order (`at`)."""
    gid = group_of(c)
    out, seen, stack = [], set(), [c.operands[0]]
    while stack:
        p = _producer(stack.pop())
        if p is None or group_of(top_level(p)) != gid:
            continue
        p = top_level(p)
        if p.operation in seen:
            continue
        seen.add(p.operation)
        out.append(p)
        stack.extend(p.operands)
    return sorted(out, key=lambda o: at[o.operation])


def _same_prologue(c0, c1, p0: list, p1: list, at: dict) -> bool:
    """c0's and c1's first factors (prologues p0, p1) are computed by equal ops from the same
    tensors (fusion cloned one prologue into each group), and c0's comes first in the block (c1
    can read it)."""
    if not p0 or len(p0) != len(p1):
        return False
    if at[p0[-1].operation] > at[c1.operation]:
        return False
    return _same_value(c0.operands[0], c1.operands[0], group_of(c0), group_of(c1))


def _same_value(v0, v1, g0: int, g1: int) -> bool:
    if v0 == v1:
        return True
    p0, p1 = _producer(v0), _producer(v1)
    if p0 is None or p1 is None or group_of(top_level(p0)) != g0 or group_of(top_level(p1)) != g1:
        return False
    if not _same_op(p0, p1):
        return False
    if _result_no(p0, v0) != _result_no(p1, v1):
        return False
    return all(_same_value(a, b, g0, g1) for a, b in zip(p0.operands, p1.operands))


def _result_no(op, v) -> int:
    return next(i for i, r in enumerate(op.results) if r == v)


def _same_op(a, b) -> bool:
    """Same name, attributes (uniorch's annotations aside), types and body; operands not compared."""
    if a.name != b.name or len(a.operands) != len(b.operands) or len(a.results) != len(b.results):
        return False
    if [str(r.type) for r in a.results] != [str(r.type) for r in b.results]:
        return False
    attrs = lambda o: sorted((a.name, str(a.attr)) for a in (o.attributes[i] for i in range(len(o.attributes)))  # noqa: E731
                             if not a.name.startswith("uniorch."))
    if attrs(a) != attrs(b) or len(a.regions) != len(b.regions):
        return False
    for ra, rb in zip(a.regions, b.regions):
        ba, bb = list(ra.blocks), list(rb.blocks)
        if len(ba) != len(bb):
            return False
        for x, y in zip(ba, bb):
            ox, oy = [o.operation for o in x.operations], [o.operation for o in y.operations]
            if len(ox) != len(oy) or [str(t.type) for t in x.arguments] != [str(t.type) for t in y.arguments]:
                return False
            for i, (u, w) in enumerate(zip(ox, oy)):
                if not _same_op(u, w):
                    return False
                for va, vb in zip(u.operands, w.operands):
                    if va == vb:
                        continue  # the same value from outside the body
                    if isinstance(va.owner, ir.Block) and isinstance(vb.owner, ir.Block):
                        if va.arg_number != vb.arg_number:
                            return False
                        continue
                    if isinstance(va.owner, ir.Block) or isinstance(vb.owner, ir.Block):
                        return False
                    ia = next((k for k, o in enumerate(ox) if o == va.owner), None)
                    ib = next((k for k, o in enumerate(oy) if o == vb.owner), None)
                    if ia is None or ia != ib or _result_no(va.owner, va) != _result_no(vb.owner, vb):
                        return False
    return True


def _outside(op, gid: int) -> bool:
    p = _producer(op.operands[0])
    return p is None or group_of(p) != gid


def _signature(c) -> tuple:
    """`_same_shape(c, x, factor=False)` holds exactly for the x of the same signature."""
    return (tuple(pat.iterator_types(c)), tuple(str(s) for s in pat.loop_sizes(c)),
            tuple(str(m) for m in pat.indexing_maps(c)), str(c.results[0].type),
            str(c.operands[1].type).split("x")[-1])


def _same_shape(c0, c1, factor: bool = True) -> bool:
    """The same first factor through the same map, and the same loops, sizes, maps and types."""
    return ((not factor or same_factor(c0.operands[0], c1.operands[0]))
            and pat.iterator_types(c0) == pat.iterator_types(c1) and pat.loop_sizes(c0) == pat.loop_sizes(c1)
            and [str(m) for m in pat.indexing_maps(c0)] == [str(m) for m in pat.indexing_maps(c1)]
            and str(c0.results[0].type) == str(c1.results[0].type)
            and str(c0.operands[1].type).split("x")[-1] == str(c1.operands[1].type).split("x")[-1])


def _reaches(groups: dict, src: int, dst: int, at: dict) -> bool:
    """Whether a value of group `src` reaches group `dst` (through any ops and groups). `groups` as
    `members` gives them now, `at` the block positions (`_positions`): values only flow forward in
    the block, so the walk stops past dst's last op (unbounded, with the members read again per
    call, it was quadratic in a model's layers)."""
    bound = max((at.get(o.operation, len(at)) for o in groups[dst]), default=len(at))
    stack = list(groups[src])
    seen: set = set()  # operations (an OpView and its Operation hash alike only through .operation)
    while stack:
        op = stack.pop()
        if op.operation in seen:
            continue
        seen.add(op.operation)
        for r in op.results:
            for u in r.uses:
                t = top_level(pat.op_of(u.owner))
                if at.get(t.operation, -1) > bound:
                    continue
                g = group_of(t)
                if g == dst:
                    return True
                if g is not None and g != src:
                    stack.extend(groups[g])
                elif g is None:
                    stack.append(t)
    return False


__all__ = ["FuseSiblings", "SIBLING", "MAX_SIBLINGS", "MAX_SIBLING_N"]
