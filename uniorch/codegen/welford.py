"""Sums of deviations from a row value, computed in the pass that sums the row (Welford).

Variances reach kernels as capture/statistics.py writes them: a sum of x (the mean's), then sums
of d = x - c and of d² with c a row value known only after the first sum. In registers
("persistent" rows) that is one read of the row and exact two-pass arithmetic. A row longer than
a block is swept in chunks, and each sum that needs c would sweep it again: LayerNorm read its
row three times. Here those sums ride on the first sweep instead: each chunk's count, mean and
sum of squared deviations from its own mean (the corrected two-pass algorithm, in registers) are
merged into a running (n, mean, M2) by Chan's update, and after the sweep, for any row value c,

    sum(x - c)   = n (mean - c)
    sum((x-c)²) = M2 + n (mean - c)²

(exact identities; the merge is Welford's algorithm chunk by chunk, as stable as two passes).
Only fp32 sums with the same x, read at the same place, and `c` ready after the first sum's phase.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from torch_mlir import ir

from . import patterns as pat


@dataclass
class Centred:
    """`sum_op` sums x; `sums` are (reduction, power) with power 1 for sum(x - c), 2 for sum((x-c)²);
    `c` is the row value (its producer op and result number)."""
    sum_op: ir.Operation
    dev_op: ir.Operation
    c: tuple
    sums: list = field(default_factory=list)


def _body_ops(g) -> list:
    return [pat.op_of(o) for o in pat.body(g).operations]


def _summed(k, g):
    """The per-element value g sums when g is a one-input f32 sum over the kernel's whole row."""
    comb = k.combiners.get(g)
    if (k.level.get(g) != "reduce" or not comb or len(comb) != 1 or comb[0][0] != "arith.addf"
            or pat.num_inputs(g) != 1 or _reduced_count(g) != k.nr
            or str(ir.ShapedType(g.results[0].type).element_type) != "f32"):
        return None
    return comb[0][1]


def _power(other, arg) -> int | None:
    """1 if a summed value is the input `arg` itself, 2 if it is `arg * arg`, else None."""
    if other == arg:
        return 1
    if isinstance(other.owner, ir.Block):
        return None
    op = pat.op_of(other.owner)
    if op.name == "arith.mulf" and op.operands[0] == arg and op.operands[1] == arg:
        return 2
    return None


def _reduced_count(g) -> int:
    n = 1
    for it, size in zip(pat.iterator_types(g), pat.loop_sizes(g)):
        if it == "reduction":
            n *= size
    return n


def find(k) -> list[Centred]:
    """The Welford plans of a reduction kernel `k` (generic_kernel.Kernel)."""
    lay = k.layout
    plans = []
    for s in k.generics:
        summed = _summed(k, s)
        if summed is None or summed != pat.body(s).arguments[0]:
            continue  # not a sum of its input itself
        x = lay.info(s).operands[0]
        x_at = lay.operand_exprs(s, 0)
        plan = None
        for use in x.uses:
            d = pat.op_of(use.owner)
            if d not in k.level or k.level[d] != "full" or d == s or pat.num_inputs(d) != 2 or use.operand_number != 0:
                continue
            ops = _body_ops(d)
            blk = pat.body(d)
            if (len(ops) != 2 or ops[0].name != "arith.subf" or list(ops[0].operands) != list(blk.arguments[:2])
                    or ops[1].operands[0] != ops[0].results[0] or lay.operand_exprs(d, 0) != x_at):
                continue
            c = lay.producer_of(lay.info(d).operands[1])
            if c is None or k.level[c[0]] != "row" or k.ready[c[0]] > k.phase[s] + 1:
                continue  # c must be known once the sum of x is
            for use2 in d.results[0].uses:
                r = pat.op_of(use2.owner)
                summed = _summed(k, r)
                if (summed is None or k.phase[r] != k.phase[s] + 1
                        or lay.operand_exprs(r, 0) != lay.result_exprs(d, 0)):
                    continue
                p = _power(summed, pat.body(r).arguments[0])
                if p is None:
                    continue
                if plan is None:
                    plan = Centred(s, d, c)
                    plans.append(plan)
                if plan.dev_op == d:
                    plan.sums.append((r, p))
    return [p for p in plans if p.sums]
