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

The anchor is C's contraction: `uniorch.kind = "chain"`, domain as attention's, `uniorch.chain`;
the op defining `H` carries `uniorch.chain_hidden` (its result number).
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from uniorch.codegen import patterns as pat
from uniorch.codegen.attention_plan import _plan, check_pair

from .base import Pass, PassContext
from .fuse_attention import _only_used_by
from .fuse_common import KIND, _widens
from .fuse_row_stats import ROW_STAT
from .groups import extend_domain, group_of, join, kind_of, merge_into_contractions
from .groups import members as group_members
from .ir_utils import main_func
from .ir_utils import producer as _producer

HIDDEN, CHAIN = "uniorch.chain_hidden", "uniorch.chain"
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
            merge_into_contractions(main.regions[0].blocks[0], _try_merge)


def _try_merge(block, c2) -> bool:
    members = group_members(block)
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
        c1s = [o for o in a_ops if pat.is_contraction(o)]
        if len(c1s) != 1 or kind_of(c1s[0]) != "contraction":
            continue
        c1 = c1s[0]
        if any(kind_of(o) == "chain" for o in members[g_c]) or any(
                o != c1 and pat.is_generic(o) and "reduction" in pat.iterator_types(o)
                and ROW_STAT not in o.attributes for o in a_ops):
            continue  # A computes more than one product (a pooling epilogue), or C is a chain already
        if not _only_used_by(a_ops, [moved.operands[0] if moved is not None else h],
                             [moved if moved is not None else c2]):
            continue
        if check_pair(c1, h, h, c2) is not None:
            continue
        p1 = _plan(c1)
        hidden = p1.sizes[p1.order["n"][0]]
        if not isinstance(hidden, int) or hidden > MAX_HIDDEN:
            continue
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


__all__ = ["FuseChain", "HIDDEN", "CHAIN", "MAX_HIDDEN"]
