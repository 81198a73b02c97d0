"""uniorch-fuse-chain: two contractions chained through a pointwise epilogue, `act(x·W1 + b1)·W2`
(a transformer's MLP), as one kernel whose hidden activation never leaves registers.

Runs after uniorch-fuse-attention. Where a contraction's group (A: the contraction, its prologue
in the factor tiles, a pointwise epilogue computing the hidden activation `H`) has nothing used
outside it but `H`, read only by the contraction of another group (C) as its factor over C's one
reduction dim, the two become one group of kind "chain". Codegen (codegen/attention.py in its
chain mode) is flash attention without the softmax: one program per tile of rows holds x's row
tile and the output tile whole and loops over the hidden dim in tiles,

    h = epilogue_A(x·W1[:, tile]);   out += h·W2[tile, :]

so nothing is computed twice and H's write and read are gone. Both held widths (x's and the
output's, the `MAX_HEAD_DIM` of attention) are at most 256 columns; wider layers keep two kernels,
where every tile of W1's columns is its own program.

A gated MLP (`act(x·Wg) * (x·Wu)`, SwiGLU, T5's gated GELU) has a second first product: the
`up` contraction, in a group of its own whose only result is read by the hidden epilogue, joins
the chain too (marked `uniorch.chain_up`) when its loops and indexing equal the gate's. The kernel
computes both products per hidden tile, `h = act(x·Wg[:, tile]) * (x·Wu[:, tile])`, so `up` is
never written either.

The anchor is C's contraction: `uniorch.kind = "chain"`, domain as attention's, `uniorch.chain`;
the op defining `H` carries `uniorch.chain_hidden` (its result number).
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from uniorch.codegen import patterns as pat
from uniorch.codegen.attention import _in_chain
from uniorch.codegen.attention_plan import _following, _plan, check_pair
from uniorch.codegen.chain_lead import LEAD, LEAD_VALUE, check_lead

from .base import Pass, PassContext
from .fuse_attention import _only_used_by
from .fuse_common import KIND, TILE_STAT, _widens
from .fuse_row_stats import ROW_STAT
from .groups import extend_domain, group_of, join, kind_of, merge_into_contractions, renumber
from .groups import members as group_members
from .ir_utils import main_func
from .recompute_hidden import clone_for_reader, worth_recomputing
from .ir_utils import producer as _producer

HIDDEN, CHAIN, UP = "uniorch.chain_hidden", "uniorch.chain", "uniorch.chain_up"
# The hidden dim is looped over by one program per row tile: past this many columns the few
# programs of a short input (decoding: one row tile) leave a GPU idle where two kernels would not.
MAX_HIDDEN = 4096


@dataclass(frozen=True)
class FuseChain(Pass):
    name = "uniorch-fuse-chain"
    summary = "merge a contraction whose activation only feeds another contraction into one chained kernel"

    def run(self, module, pctx: PassContext) -> None:
        main = main_func(module)
        with module.context:
            block = main.regions[0].blocks[0]
            merge_into_contractions(block, _try_merge)
            chains = [o.operation for o in block.operations if CHAIN in o.operation.attributes]
            if _each_chain(block, chains, _take_up):
                renumber(block)
            if _each_chain(block, chains, _take_lead):
                renumber(block)


def _each_chain(block, chains: list, take) -> bool:
    """`take(block, chain, groups)` for each chain, `groups` as `merge_into_contractions` gives it."""
    changed, now = False, group_members(block)
    for c in chains:
        if take(block, c, now):
            changed, now = True, group_members(block)
    return changed


def _try_merge(block, c2, members: dict) -> bool:
    g_c = group_of(c2)
    for h in list(c2.opview.inputs):
        p = _producer(h)
        moved = None
        if p is not None and group_of(p) == g_c and _widens(p) and _producer(p.operands[0]) is not None:
            # a 16-bit activation widened for the second product: the widening sits in C's kernel
            # (so the stored value stays 16-bit); in the chain it is the hidden epilogue's last op
            moved, p = p, _producer(p.operands[0])
        g_a = group_of(p) if p is not None else None
        if g_a is None or g_a == g_c:
            continue
        a_ops = members[g_a]
        c1 = _lone_product(a_ops)
        if c1 is None or any(kind_of(o) == "chain" for o in members[g_c]):
            continue  # A computes more than one product (a pooling epilogue), or C is a chain already
        if any(TILE_STAT in o.attributes for o in members[g_c]):
            continue  # C's epilogue writes partial sums of its rows (a loss's sum), which a chain does not
        read, reader = (moved.operands[0], moved) if moved is not None else (h, c2)
        if check_pair(c1, h, h, c2) is not None:
            continue
        p1 = _plan(c1)
        hidden = p1.sizes[p1.order["n"][0]]
        if not isinstance(hidden, int) or hidden > MAX_HIDDEN:
            continue
        if not _only_used_by(a_ops, [read], [reader]):
            if not worth_recomputing(a_ops, c1, read):
                continue
            new = clone_for_reader(block, a_ops, read, reader)
            if new is None:
                continue
            # the clone's group is A for this reader (see passes/recompute_hidden.py)
            a_ops = group_members(block)[group_of(new.owner)]
            c1 = _lone_product(a_ops)
            if moved is None:
                h = new
        _annotate(a_ops + ([moved] if moved is not None else []), members[g_c], g_c, c1, c2,
                  moved if moved is not None else _producer(h), h)
        return True
    return False


def _annotate(a_ops, c_ops, gid: int, c1, c2, h_op, h) -> None:
    for o in a_ops + c_ops:
        if o != c2:
            join(o, gid)
    h_no = next(i for i, r in enumerate(h_op.results) if r == h)
    h_op.attributes[HIDDEN] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), h_no)
    c2.attributes[KIND] = ir.StringAttr.get("chain")
    c2.attributes[CHAIN] = ir.DictAttr.get({})
    extend_domain(c2, c1)


def _take_up(block, c2, members: dict) -> bool:
    """The `up` product of a gated MLP joins the chain anchored by c2 (see the module doc)."""
    gid = group_of(c2)
    chain_ops = members[gid]
    hidden = next((o for o in chain_ops if HIDDEN in o.attributes), None)
    c1s = [o for o in chain_ops if o != c2 and pat.is_contraction(o) and UP not in o.attributes]
    if hidden is None or len(c1s) != 1 or any(UP in o.attributes for o in chain_ops):
        return False
    c1 = c1s[0]
    for v in _epilogue_inputs(chain_ops, c1, hidden):
        p = _producer(v)
        g_u = group_of(p) if p is not None else None
        if g_u is None or g_u == gid:
            continue
        u_ops = members[g_u]
        cu = _lone_product(u_ops)
        if cu is None:
            continue
        # the cheap checks first: the walks of `_feeds` can cross the model (a product of another
        # layer whose output reaches this epilogue)
        if not _same_product(c1, cu) or not _only_used_by(u_ops, [v], chain_ops):
            continue
        # its prologue, and a pointwise epilogue (16-bit models round `up` as eager stores it)
        if not all(o == cu or _feeds(o, cu) or _feeds(cu, o) for o in u_ops):
            continue
        for o in u_ops:
            join(o, gid)
        cu.attributes[UP] = ir.UnitAttr.get()
        return True
    return False


def _take_lead(block, c2, members: dict) -> bool:
    """The contraction whose epilogue computes the chain's input rows joins the chain anchored by
    c2 as its lead (codegen/chain_lead.py): a group of one product and its epilogue (bias,
    residual, LayerNorm: row statistics over its whole output row), whose only result is read
    only by the chain."""
    gid = group_of(c2)
    chain_ops = members[gid]
    c1s = [o for o in chain_ops if o != c2 and pat.is_contraction(o) and UP not in o.attributes]
    if len(c1s) != 1 or any(LEAD in o.attributes for o in chain_ops):
        return False
    c1 = c1s[0]
    for op in chain_ops:
        for x in pat.op_of(op).operands:
            p = _producer(x)
            g0 = group_of(p) if p is not None else None
            if g0 is None or g0 == gid:
                continue
            l_ops = members[g0]
            c0 = _lone_product(l_ops, convolutions=True)  # a depthwise convolution leads too
            if c0 is None or not _only_used_by(l_ops, [x], chain_ops) \
                    or check_lead(c0, x, c1, _following(c0)) is not None:
                continue
            for o in l_ops:
                join(o, gid)
            c0.attributes[LEAD] = ir.UnitAttr.get()
            p.attributes[LEAD_VALUE] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), ir.OpResult(x).result_number)
            extend_domain(c2, c0)
            return True
    return False


def _lone_product(ops, convolutions: bool = False):
    """The one contraction (or with `convolutions`, convolution) of a group of kind "contraction"
    whose other reductions are at most row statistics (no pooling epilogue, no sibling products),
    or None."""
    cs = [o for o in ops if pat.is_contraction(o) or (convolutions and pat.is_convolution(o))]
    if len(cs) != 1 or kind_of(cs[0]) != "contraction":
        return None
    if any(o != cs[0] and pat.is_generic(o) and "reduction" in pat.iterator_types(o)
           and ROW_STAT not in o.attributes for o in ops):
        return None
    return cs[0]


def _epilogue_inputs(chain_ops, c1, hidden) -> list:
    """Tensors read by the hidden activation's epilogue (from c1's result to `hidden`) that come
    from outside the chain's group."""
    inside = [pat.op_of(o) for o in chain_ops]
    out, stack, seen = [], [hidden], []
    while stack:
        op = stack.pop()
        if any(op == s for s in seen) or op == c1:
            continue
        seen.append(op)
        for v in op.operands:
            p = _producer(v)
            if p is None:
                continue
            if any(p == i for i in inside):
                stack.append(p)
            elif pat.is_generic(p) and v not in out:
                out.append(v)
    return out


def _feeds(op, target) -> bool:
    """`op` is computed before `target` and read by it (through other ops)."""
    return _in_chain(op, *target.operands)


def _same_product(c1, cu) -> bool:
    """Same loops, sizes and indexing: the two products' tiles are the same (rows, hidden columns)."""
    return (pat.iterator_types(c1) == pat.iterator_types(cu) and pat.loop_sizes(c1) == pat.loop_sizes(cu)
            and [str(m) for m in pat.indexing_maps(c1)] == [str(m) for m in pat.indexing_maps(cu)]
            and str(c1.results[0].type) == str(cu.results[0].type))


__all__ = ["FuseChain", "HIDDEN", "CHAIN", "UP", "MAX_HIDDEN"]
