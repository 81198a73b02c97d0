"""uniorch-fuse-operand-sums: a sum of a matmul's factor over the matmul's reduction joins the
matmul's kernel (a linear layer's bias gradient in its weight gradient's kernel).

A reduction group that is one plain sum (and the fill of its accumulator) whose input is a factor
of a matmul group, summed over exactly the matmul's K dims and kept along the factor's rows,
joins that group: the kernel sums each factor tile it loads (codegen/operand_sums.py has the
condition, codegen/contraction_emit.py the code). The training backward of every `nn.Linear`
with a bias has one: `sum(dY, rows)` beside `dYᵀ X`, so the bias gradient no longer reads dY
again in a kernel of its own. The matmul's group must be a plain product (no pooling, row or
tile statistics, sibling products or other reduction), with static shapes, and neither group may
reach the other.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from uniorch.codegen import patterns as pat
from uniorch.codegen.operand_sums import OPERAND_SUM, cast_tail, sum_mapping

from .base import Pass, PassContext
from .fuse_siblings import SIBLING, _positions, _reaches
from .groups import group_of, join, kind_of, members, renumber
from .ir_utils import main_func

@dataclass(frozen=True)
class FuseOperandSums(Pass):
    name = "uniorch-fuse-operand-sums"
    summary = "compute a sum of a matmul factor over its K dims in the matmul's kernel (bias gradients)"

    def run(self, module, pctx: PassContext) -> None:
        main = main_func(module)
        block = main.regions[0].blocks[0]
        with module.context:
            groups, at = members(block), _positions(block)
            anchors = [o for o in (x.operation for x in block.operations)
                       if kind_of(o) == "contraction" and pat.is_contraction(o) and _plain(groups[group_of(o)], o)]
            taken: list[set] = [set() for _ in anchors]  # per matmul, the factor sides a sum rides on
            merged = False
            for gid, ops in list(groups.items()):
                r = _lone_sum(ops)
                if r is None:
                    continue
                for n, c in enumerate(anchors):
                    gc = group_of(c)
                    if gc == gid:
                        continue
                    got = sum_mapping(c, r, lambda t, g=gc: group_of(t) == g)
                    if got is None or got[0] in taken[n] or _reaches(groups, gid, gc, at) \
                            or _reaches(groups, gc, gid, at):
                        continue
                    for o in ops:
                        join(o, gc)
                    groups[gc] = groups[gc] + groups.pop(gid)
                    r.attributes[OPERAND_SUM] = ir.UnitAttr.get()
                    taken[n].add(got[0])
                    merged = True
                    break
            if merged:
                renumber(block)


def _lone_sum(ops: list):
    """The sum generic if a group is that sum, the fills of its accumulator and casts of its result
    (codegen/operand_sums.py `cast_tail`), else None."""
    reds = [o for o in ops if pat.is_reduction(o)]
    if len(reds) != 1 or OPERAND_SUM in reds[0].attributes:
        return None
    r = reds[0]
    tail = {pat.op_of(v.owner) for v, _ in cast_tail(r)[1:]}
    for o in ops:
        if o == r or any(o == t for t in tail):
            continue
        if not pat.is_fill(o) or any(u.owner != r for res in o.results for u in res.uses):
            return None
    for v in list(r.operands) + list(r.results):
        if isinstance(v.type, ir.ShapedType) and not ir.ShapedType(v.type).has_static_shape:
            return None
    return r


def _plain(ops: list, c) -> bool:
    """c's group: c the one reduction, no sibling product, static shapes."""
    if SIBLING in c.attributes or any(SIBLING in o.attributes for o in ops):
        return False
    if any(o != c and pat.is_reduction(o) and OPERAND_SUM not in o.attributes for o in ops):
        return False
    return all(not isinstance(v.type, ir.ShapedType) or ir.ShapedType(v.type).has_static_shape
               for v in list(c.operands) + list(c.results))


__all__ = ["FuseOperandSums", "OPERAND_SUM"]
