"""uniorch-fuse-attention: QKᵀ, its score epilogue, softmax and PV as one flash-attention kernel.

Runs after uniorch-fuse, which leaves attention as three kernels (a contraction with the scale and
mask as its epilogue, a softmax reduction, a contraction) that write and read the T x T scores and
probabilities. Where those three groups are exactly that, they become one group of kind
"attention" (codegen/attention.py: online softmax over key tiles, scores never stored):

- group A: a contraction (scores = q·kᵀ over the head dim) and the pointwise epilogue computing
  the scores `S` (scale, causal or padding masks, additive biases: anything pointwise, reading
  other tensors or indices), with nothing of it used outside but `S`, by the softmax only;
- group B: softmax of `S` over its last dimension (codegen/softmax_match.py: plain or SDPA's
  safe form), with nothing used outside but the probabilities `P`, by the second contraction only;
- group C: a contraction reading `P` as its factor over the key dimension, with its epilogue.

The merged group's anchor is group C's contraction: `uniorch.kind = "attention"`, its domain
`{parallel = [batch..., queries, head dim of v], reduction = [keys, head dim]}`, and
`uniorch.attention = {scores = <result number on the op that defines S>, safe}`; the op defining
`S` carries `uniorch.attention_scores`. Anything else is left as it was.

Group B may also return the log-sum-exp of `S` over the keys (SDPA's forward in training returns
it for the backward: capture/fused_attention.py computes both from one `S`). It is matched as
such (codegen/softmax_match.py `match_logsumexp`), joins the group, and its op carries
`uniorch.attention_lse`: the kernel stores `m + log(l)` from its online softmax, and no T x T
tensor is written for it.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from uniorch.codegen import patterns as pat
from uniorch.codegen.attention_plan import MAX_HEAD_DIM, check_pair
from uniorch.codegen.softmax_match import match_softmax

from .base import Pass, PassContext
from .fuse_common import KIND, _widens
from .groups import extend_domain, group_of, join, kind_of, merge_into_contractions, top_level
from .ir_utils import main_func
from .ir_utils import producer as _producer

SCORES, ATTENTION = "uniorch.attention_scores", "uniorch.attention"
LSE = "uniorch.attention_lse"  # on the op whose result (this number) is the scores' log-sum-exp
_UNIT_VIEWS = ("tensor.expand_shape", "tensor.collapse_shape")


@dataclass(frozen=True)
class FuseAttention(Pass):
    name = "uniorch-fuse-attention"
    summary = "merge QK^T + score epilogue, softmax and PV groups into one flash-attention kernel"

    def run(self, module, pctx: PassContext) -> None:
        main = main_func(module)
        with module.context:
            merge_into_contractions(main.regions[0].blocks[0], _try_merge)


def _users(v) -> list:
    return [pat.op_of(u.owner) for u in v.uses]


def _try_merge(block, c2, base: dict) -> bool:
    g_c = group_of(c2)
    for probs in list(c2.opview.inputs):
        members = dict(base)  # each entry below is replaced, never changed in place
        p = _producer(probs)
        moved = None
        if p is not None and group_of(p) == g_c and _widens(p) and _producer(p.operands[0]) is not None:
            # bf16 probabilities widened for PV: fusion left the widening to PV's kernel (so a stored
            # value stays 16-bit); here it belongs to the softmax
            moved, p = p, _producer(p.operands[0])
            members[g_c] = [o for o in members[g_c] if o != moved]
        split = None
        if moved is None and p is not None and group_of(p) is None and p.name == "tensor.expand_shape":
            # GQA: softmax over the merged heads, split into (key-value group, repeat) for P·v
            split, p = p, _producer(p.operands[0])
        prologue: list = []
        if split is None and p is not None and group_of(p) == g_c and p != c2:
            # P = exp(S - lse) in P·v's prologue, lse a reduction of its own group (a training
            # forward whose backward recomputes P: runtime/attention_recompute.py), or softmax's
            # division there (Bloom's, rounded to bf16 and widened again): the prologue belongs
            # to the softmax, whose group is the reductions'
            prologue, p = _probs_prologue(p, c2, g_c, [moved] if moved is not None else [])
            members[g_c] = [o for o in members[g_c] if not any(o == q for q in prologue)]
        g_b = group_of(p) if p is not None else None
        if g_b is None or g_b == g_c:
            continue
        moved_ops = ([moved] if moved is not None else []) + prologue
        members[g_b] = members[g_b] + moved_ops
        in_b = lambda o: (group_of(o) == g_b or any(o == m for m in moved_ops)  # noqa: E731
                          or (group_of(o) is None and o.name in _UNIT_VIEWS))
        sm = match_softmax(probs if split is None else split.operands[0], in_b)
        if sm is None:
            continue
        s_op = _producer(sm.source)
        c1 = _scores_contraction(sm.source, in_b)
        g_a = group_of(c1) if c1 is not None else None
        if s_op is None or g_a is None or g_a in (g_b, g_c) or kind_of(c1) != "contraction":
            continue
        widened = _producer(s_op.operands[0]) if _widens(s_op) else None
        if group_of(s_op) == g_b and widened is not None and group_of(widened) != g_b:
            # bf16 scores widened for the softmax: fusion leaves the widening to the softmax's
            # kernel (so a stored value stays 16-bit); here it belongs to the scores' epilogue
            # (unless the epilogue is the softmax's too: Bloom's ALiBi and mask behind a view)
            members = {g: [o for o in ops_ if o != s_op] for g, ops_ in members.items()}
            members[g_a] = members[g_a] + [s_op]
        b_ops = members[g_b] + _views(block, sm.ops) + ([split] if split is not None else [])
        b_ops += _merges(members[g_a], b_ops)
        b_ops = _unshared(b_ops, members[g_a] + members[g_c])
        if not _only_used_by(members[g_a], None, b_ops):
            continue
        lse = _lse_outputs(b_ops, probs, c2, sm, in_b)
        if lse is None:
            continue
        known = sm.ops + [o for m in lse for o in m.ops]
        if any(pat.is_generic(o) and not any(o == m for m in known) for o in members[g_b]):
            continue  # group B computes more than the scores' epilogue, the softmax and its log-sum-exp
        c1s = [c1]
        why = check_pair(c1s[0], sm.source, probs, c2)
        if why:
            continue
        _annotate(block, members[g_a] + b_ops + members[g_c], g_c, c1s[0], c2, s_op, sm)
        for m in lse:
            i64 = ir.IntegerType.get_signless(64)
            pat.op_of(m.value.owner).attributes[LSE] = ir.IntegerAttr.get(i64, ir.OpResult(m.value).result_number)
        return True
    return False


def _probs_prologue(p, c2, g_c, readers: list):
    """([the pointwise ops of P·v's group computing its factor P], the op of another group with a
    reduction that they read: the log-sum-exp's); ([], p) where that is not so."""
    ops, stack = [], [p]
    outside = None
    while stack:
        o = stack.pop()
        if any(o == q for q in ops):
            continue
        if group_of(o) != g_c or o == c2 or not pat.is_generic(o) or "reduction" in pat.iterator_types(o):
            return [], p
        ops.append(o)
        for v in o.operands:
            q = _producer(v)
            if q is None:
                continue
            if group_of(q) == g_c:
                stack.append(q)
            elif pat.is_generic(q) and "reduction" in pat.iterator_types(q):
                outside = q if outside is None or outside == q else outside
    if outside is None or any(not any(top_level(u) == q for q in ops + [c2] + readers)
                              for o in ops for r in o.results for u in _users(r)):
        return [], p
    return ops, outside


def _lse_outputs(b_ops, probs, c2, sm, in_b):
    """The log-sum-exps of the scores that group B also returns (a training forward saves it for
    SDPA's backward), each matched (codegen/softmax_match.py `match_logsumexp`), when every other
    result of B is read inside it or is P, read by P·v only; None otherwise."""
    from uniorch.codegen.softmax_match import _nonunit, _shape, match_logsumexp

    inside = [pat.op_of(o) for o in b_ops]
    c2 = pat.op_of(c2)
    found = []
    for o in b_ops:
        for r in o.results:
            outside = [top_level(u) for u in _users(r) if not any(top_level(u) == i for i in inside)]
            if not outside:
                continue
            if r == probs and all(u == c2 for u in outside):
                continue
            m = match_logsumexp(r, in_b, _nonunit(_shape(sm.source)))
            if m is None or m.source != sm.source or str(ir.ShapedType(r.type).element_type) != "f32":
                return None  # the kernel's running max and sum are float32: a float64 one stays apart
            m.value = r
            found.append(m)
    return found


def _scores_contraction(scores, in_b):
    """The contraction the scores are computed from: the one reached by walking back from them
    through pointwise ops and views (in the softmax's group or its own)."""
    stack, seen = [scores], []
    while stack:
        v = stack.pop()
        p = _producer(v)
        if p is None or any(p == s for s in seen):
            continue
        seen.append(p)
        if pat.is_contraction(p):
            return p
        if pat.is_generic(p) and "reduction" in pat.iterator_types(p):
            return None
        stack.extend(w for w in p.operands if isinstance(w.type, ir.ShapedType))
    return None


def _merges(a_ops, b_ops) -> list:
    """Ungrouped collapses of group A's results read only by group B: GQA's scores computed per
    (key-value group, repeat) and merged into heads before the mask and softmax."""
    out = []
    for o in a_ops:
        for r in o.results:
            for u in _users(r):
                if (u.name == "tensor.collapse_shape" and group_of(u) is None
                        and all(any(x == b for b in b_ops) for x in _users(u.results[0]))):
                    out.append(u)
    return out


def _unshared(b_ops, others) -> list:
    """`b_ops` less the ungrouped unit views of a tensor from outside that other kernels read too
    (Bloom's ALiBi bias, viewed once for every layer's scores): the kernel reads it through the
    view, as each of the others does, and the view stays no kernel's."""
    inside = [pat.op_of(o) for o in b_ops + others]
    is_in = lambda o: any(o == i for i in inside)  # noqa: E731
    out = []
    for o in b_ops:
        src = _producer(o.operands[0]) if o.name in _UNIT_VIEWS else None
        if (group_of(o) is None and o.name in _UNIT_VIEWS and not (src is not None and is_in(top_level(src)))
                and any(not is_in(top_level(u)) for u in _users(o.results[0]))):
            continue
        out.append(o)
    return out


def _views(block, ops) -> list:
    return [o for o in ops if o.name in _UNIT_VIEWS and group_of(o) is None]


def _only_used_by(group_ops, allowed_values, readers) -> bool:
    """Every result of the group is read inside it, or is one of `allowed_values` read by `readers`."""
    inside = [pat.op_of(o) for o in group_ops]
    readers = [pat.op_of(o) for o in readers] + inside
    for o in group_ops:
        for r in o.results:
            for u in _users(r):
                top = top_level(u)
                if any(top == i for i in inside):
                    continue
                if (allowed_values is None or any(r == v for v in allowed_values)) and any(top == x for x in readers):
                    continue
                return False
    return True


def _annotate(block, ops, gid: int, c1, c2, s_op, sm) -> None:
    for o in ops:
        if o != c2:
            join(o, gid)
    s_no = next(i for i, r in enumerate(s_op.results) if r == sm.source)
    s_op.attributes[SCORES] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), s_no)
    c2.attributes[KIND] = ir.StringAttr.get("attention")
    c2.attributes[ATTENTION] = ir.DictAttr.get({"safe": ir.BoolAttr.get(sm.safe)})
    extend_domain(c2, c1)


__all__ = ["FuseAttention", "MAX_HEAD_DIM"]
