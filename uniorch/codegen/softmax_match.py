"""Is a tensor the softmax of another over its last dimension? Read off the linalg ops that compute
it, whatever shape torch-mlir and elementwise fusion gave them.

`_softmax` reaches linalg as a max reduction, `exp(x - max)`, a sum reduction and a division,
spread over one to four generics, with unit-dim reshapes between them (keepdim), casts around
them (16-bit inputs compute in fp32) and, for SDPA's math path, a "safe" form that gives 0 instead
of NaN on rows that are entirely -inf: `where(all(x == -inf), 0, softmax(x))`. Each generic's body
is evaluated symbolically over one row (`full` values vary along the reduced dim, `row` values do
not), and the expression of the result is compared with those forms. Anything else (another
reduction, a transpose, a value from outside besides the input) is no match.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from . import patterns as pat

_UNIT_VIEWS = ("tensor.expand_shape", "tensor.collapse_shape")
_MAX = ("arith.maximumf", "arith.maxnumf")


@dataclass
class Softmax:
    source: ir.Value        # the tensor softmax is taken of (the attention scores)
    safe: bool              # all -inf rows give 0 (SDPA's math path), else NaN (torch.softmax)
    ops: list               # the top-level ops computing it


class _NoMatch(Exception):
    pass


def _shape(v) -> list:
    """Dims of a value; symbolic ones as their expressions (uniorch/ir/dims.py), so two `?` dims
    are equal only when they are the same size."""
    from uniorch.ir import dims

    try:
        return dims.known_shape(v)
    except dims.UnknownSize:
        raise _NoMatch() from None


def _nonunit(shape) -> list[int]:
    return [s for s in shape if s != 1]


def match_softmax(probs: ir.Value, allowed) -> Softmax | None:
    """The softmax `probs` is, computed by ops in `allowed` (a predicate on top-level ops)."""
    try:
        return _Matcher(allowed).run(probs)
    except (_NoMatch, ValueError, KeyError, IndexError, TypeError):
        return None


class _Matcher:
    def __init__(self, allowed):
        self.allowed = allowed
        self.source = None
        self.full = None      # non-unit shape of the source (rows..., key)
        self.ops: list = []
        self.memo: list = []  # [(value, expr)]
        self.sources: list = []  # [(signature, value)] of the scores' leaves
        self.ext: list = []      # values from outside the group, numbered for signatures

    def run(self, probs):
        self.full = _nonunit(_shape(probs))  # softmax keeps its input's shape
        if len(self.full) < 2:
            raise _NoMatch
        kind, expr = self.tensor(probs)
        if len(self.sources) != 1 or kind != "full":
            raise _NoMatch
        self.source = self.sources[0][1]
        while expr[0] in ("arith.truncf", "arith.extf"):  # the probabilities' own storage type
            expr = expr[1]
        x = ("S",)
        for cand in (("S",), ("arith.extf", ("S",))):
            if _contains(expr, cand):
                x = cand if _is_softmax(_core(expr), cand) or _is_safe(expr, cand) or _is_exp_lse(expr, cand) else x
        if _is_softmax(expr, x):
            return Softmax(self.source, False, self.ops)
        if _is_safe(expr, x) or _is_exp_lse(expr, x):
            return Softmax(self.source, True, self.ops)
        raise _NoMatch

    # -- tensors --------------------------------------------------------------------------------
    def tensor(self, v):
        """('full', expr) or ('row', expr) for a tensor value."""
        for k, e in self.memo:
            if k == v:
                return e
        e = self._tensor(v)
        self.memo.append((v, e))
        return e

    def _tensor(self, v):
        owner = None if isinstance(v.owner, ir.Block) else pat.op_of(v.owner)
        if owner is None or not self.allowed(owner) or self.score_value(v):
            # the scores: from outside, or a pointwise score epilogue the group cloned (masks read
            # per use): identical clones have one signature, so they are one leaf
            if _nonunit(_shape(v)) != self.full:
                raise _NoMatch
            sig = self.signature(v)
            if sig is None:
                raise _NoMatch
            if not any(sig == s for s, _ in self.sources):
                self.sources.append((sig, v))
            if owner is not None and self.allowed(owner):
                self.ops.extend(self.ancestors(v))
            return ("full", ("S",) if len(self.sources) == 1 and self.sources[0][0] == sig else ("S", sig))
        self.ops.append(owner)
        if owner.name in _UNIT_VIEWS:
            if _nonunit(_shape(owner.operands[0])) != _nonunit(_shape(v)):
                raise _NoMatch
            return self.tensor(owner.operands[0])
        if not pat.is_generic(owner):
            raise _NoMatch
        return self.generic(owner, ir.OpResult(v).result_number)

    def score_value(self, v) -> bool:
        """A full-shaped value the group computes pointwise from outside values and indices only."""
        owner = pat.op_of(v.owner)
        return (pat.is_generic(owner) and "reduction" not in pat.iterator_types(owner)
                and _nonunit(_shape(v)) == self.full and self.signature(v) is not None
                and self.outside_reads(v))

    def outside_reads(self, v) -> bool:
        """Whether v's computation inside the group reads something from outside it (the scores)."""
        owner = None if isinstance(v.owner, ir.Block) else pat.op_of(v.owner)
        if owner is None or not self.allowed(owner):
            return True
        return any(isinstance(w.type, ir.ShapedType) and self.outside_reads(w) for w in owner.operands)

    def signature(self, v):
        """A structural key of v's computation inside the group (None if it reduces)."""
        owner = None if isinstance(v.owner, ir.Block) else pat.op_of(v.owner)
        if owner is None or not self.allowed(owner):
            for i, e in enumerate(self.ext):
                if e == v:
                    return ("ext", i)
            self.ext.append(v)
            return ("ext", len(self.ext) - 1)
        if owner.name in _UNIT_VIEWS:
            inner = self.signature(owner.operands[0])
            return None if inner is None else ("view", str(v.type), inner)
        if not pat.is_generic(owner) or "reduction" in pat.iterator_types(owner):
            return None
        ins = []
        for w in owner.opview.inputs:
            if isinstance(w.type, ir.ShapedType):
                s = self.signature(w)
                if s is None:
                    return None
                ins.append(s)
            else:
                ins.append(("scalar", _const(w)))
        body = _body_signature(owner.regions[0].blocks[0])
        maps = tuple(str(m) for m in pat.indexing_maps(owner))
        return ("gen", ir.OpResult(v).result_number, str(v.type), maps, body, tuple(ins))

    def ancestors(self, v) -> list:
        owner = None if isinstance(v.owner, ir.Block) else pat.op_of(v.owner)
        if owner is None or not self.allowed(owner):
            return []
        out = [owner]
        for w in owner.operands:
            if isinstance(w.type, ir.ShapedType):
                out += self.ancestors(w)
        return out

    def kind_of(self, v) -> str:
        shape = _nonunit(_shape(v))
        if self.full is not None and shape == self.full:
            return "full"
        if self.full is not None and shape == self.full[:-1]:
            return "row"
        raise _NoMatch

    # -- generics -------------------------------------------------------------------------------
    def generic(self, op, result_no: int):
        view = op.opview
        ins, outs = list(view.inputs), list(view.outputs)
        maps = pat.indexing_maps(op)
        iters = pat.iterator_types(op)
        sizes = pat.loop_sizes(op)
        body = op.regions[0].blocks[0]
        # the loops at the non-unit positions of an operand, in order
        def loops(v, mp):
            shape = _shape(v)
            out = []
            for j, e in enumerate(mp.results):
                if shape[j] == 1:
                    continue
                if not isinstance(e, ir.AffineDimExpr):
                    raise _NoMatch
                out.append(e.position)
            return out

        out_v = outs[result_no]
        out_loops = loops(out_v, maps[len(ins) + result_no])
        reductions = [d for d, it in enumerate(iters) if it == "reduction" and sizes[d] != 1]
        yop = list(body.operations)[-1]
        args = list(body.arguments)
        env: list = []
        if reductions:
            if len(reductions) != 1 or len(outs) != 1 or self.kind_of(out_v) != "row":
                raise _NoMatch
            # one full-shaped input reduced; others row values read along (a log-sum-exp's sum of
            # exp(x - max), its max broadcast over the row)
            for n, v in enumerate(ins):
                if not isinstance(v.type, ir.ShapedType):
                    raise _NoMatch
                k = self.kind_of(v)
                if loops(v, maps[n]) != (out_loops + reductions if k == "full" else out_loops):
                    raise _NoMatch
                t = self.tensor(v)
                if t[0] != k:
                    raise _NoMatch
                env.append((args[n], t[1]))
            if [self.kind_of(v) for v in ins].count("full") != 1:
                raise _NoMatch
            init = self.fill_value(out_v)
            env.append((args[len(ins)], ("acc",)))
            e = self.body(body, yop.operands[0], env)
            comb = e[0] if len(e) == 3 else None
            if comb is None or not ((e[1] == ("acc",)) ^ (e[2] == ("acc",))):
                raise _NoMatch
            elem = e[2] if e[1] == ("acc",) else e[1]
            want = pat.COMBINERS.get(comb, "?")
            if comb == "arith.andi":
                want = True
            if comb in _MAX:
                want = float("-inf")
            if init != want and not (isinstance(want, float) and init == want):
                raise _NoMatch
            return ("row", ("reduce", comb, elem))
        kind = self.kind_of(out_v)
        for n, v in enumerate(ins):
            if not isinstance(v.type, ir.ShapedType):
                env.append((args[n], self.scalar(v)))
                continue
            if not _shape(v) or not _nonunit(_shape(v)):
                raise _NoMatch
            k = self.kind_of(v)
            got = loops(v, maps[n])
            want = out_loops if k == kind else (out_loops[:-1] if (k, kind) == ("row", "full") else None)
            if got != want:
                raise _NoMatch
            t = self.tensor(v)
            if t[0] != k:
                raise _NoMatch
            env.append((args[n], t[1]))
        for n in range(len(outs)):
            env.append((args[len(ins) + n], ("out",)))
        return (kind, self.body(body, yop.operands[result_no], env))

    def fill_value(self, v):
        owner = None if isinstance(v.owner, ir.Block) else pat.op_of(v.owner)
        while owner is not None and owner.name in _UNIT_VIEWS:
            v = owner.operands[0]
            owner = None if isinstance(v.owner, ir.Block) else pat.op_of(v.owner)
        if owner is None or not pat.is_generic(owner) or not pat.is_fill(owner) or not self.allowed(owner):
            raise _NoMatch
        self.ops.append(owner)
        body = owner.regions[0].blocks[0]
        yv = list(body.operations)[-1].operands[0]
        ins = list(owner.opview.inputs)
        if isinstance(yv.owner, ir.Block):
            return _const(ins[ir.BlockArgument(yv).arg_number])
        return _const(yv)

    def scalar(self, v):
        c = _const(v)
        if c is None:
            raise _NoMatch
        return ("const", c)

    def body(self, body, v, env):
        for a, e in env:
            if a == v:
                if e == ("out",):
                    raise _NoMatch  # reads its (uninitialised) output
                return e
        if isinstance(v.owner, ir.Block):
            raise _NoMatch
        op = pat.op_of(v.owner)
        if op.name == "arith.constant":
            return ("const", _const(v))
        if op.name == "linalg.index" or len(op.results) != 1:
            raise _NoMatch
        args = tuple(self.body(body, w, env) for w in op.operands)
        if op.name in ("arith.cmpf",):
            return (op.name, int(ir.IntegerAttr(op.attributes["predicate"]).value)) + args
        return (op.name,) + args


@dataclass
class LogSumExp:
    source: ir.Value        # the tensor the log-sum-exp is taken of, over its last dim
    ops: list               # the top-level ops computing it
    value: object = None    # the log-sum-exp itself (set by its caller)


def match_logsumexp(lse: ir.Value, allowed, full: list) -> LogSumExp | None:
    """The log-sum-exp over the last dim that `lse` (a row-shaped value: the keepdim unit dim or
    none) is, computed by ops in `allowed` from one full-shaped tensor of non-unit shape `full`:
    `log(sum(exp(x - m))) + m` with m = max(x), or torch.logsumexp's m = where(|max(x)| == inf, 0,
    max(x)); 0 where that is -inf (a row of only -inf: capture/fused_attention.py's form, which the
    flash kernel stores)."""
    try:
        m = _Matcher(allowed)
        m.full = list(full)
        kind, expr = m.tensor(lse)
        if kind != "row" or len(m.sources) != 1:
            return None
        x = ("S",)
        while expr[0] == "arith.extf":  # the row's own storage type
            expr = expr[1]
        if not (expr[0] == "arith.select" and len(expr) == 4 and expr[2] == ("const", 0.0)
                and expr[1] == ("arith.cmpf", _OEQ, expr[3], ("const", float("-inf")))):
            return None
        expr = expr[3]
        if not _is_logsumexp(expr, x) and not _is_logsumexp(expr, ("arith.extf", x)):
            return None
        return LogSumExp(m.sources[0][1], m.ops)
    except (_NoMatch, ValueError, KeyError, IndexError, TypeError):
        return None


def _is_exp_lse(e, x) -> bool:
    """e == exp(x - lse) with lse the log-sum-exp of x over the row, 0 for a row of only -inf (a
    training forward's probabilities where the backward recomputes them: runtime/attention_recompute.py);
    a row of only -inf gets 0, as the safe softmax."""
    if e[0] != "math.exp" or len(e) != 2 or e[1][0] != "arith.subf" or len(e[1]) != 3 or e[1][1] != x:
        return False
    lse = e[1][2]
    return (lse[0] == "arith.select" and len(lse) == 4 and lse[2] == ("const", 0.0)
            and lse[1] == ("arith.cmpf", _OEQ, lse[3], ("const", float("-inf")))
            and any(_is_logsumexp(lse[3], y) for y in (x, x[1] if x[0] == "arith.extf" else ("arith.extf", x))))


def _is_logsumexp(e, x) -> bool:
    if e[0] != "arith.addf" or len(e) != 3:
        return False
    for log, shift in ((e[1], e[2]), (e[2], e[1])):
        if not _is_row_max(shift, x) or log[0] != "math.log":
            continue
        total = log[1]
        if total[0] == "reduce" and total[1] == "arith.addf" and total[2] == ("math.exp", ("arith.subf", x, shift)):
            return True
    return False


def _is_row_max(e, x) -> bool:
    """e == max(x), or where(|max(x)| == inf, 0, max(x))."""
    if e[0] == "reduce" and e[1] in _MAX and e[2] == x:
        return True
    if e[0] != "arith.select" or len(e) != 4 or e[2] != ("const", 0.0) or not _is_row_max(e[3], x):
        return False
    cond = e[1]
    return (cond[0] == "arith.cmpf" and cond[1] == _OEQ and cond[2] == ("math.absf", e[3])
            and cond[3] == ("const", float("inf")))


def _const(v):
    owner = None if isinstance(v.owner, ir.Block) else pat.op_of(v.owner)
    if owner is None or owner.name != "arith.constant":
        return None
    a = owner.attributes["value"]
    if isinstance(a, ir.FloatAttr):
        return float(ir.FloatAttr(a).value)
    if isinstance(a, ir.BoolAttr):
        return bool(ir.BoolAttr(a).value)
    if isinstance(a, ir.IntegerAttr):
        val = ir.IntegerAttr(a).value
        return bool(val) if str(ir.IntegerAttr(a).type) == "i1" else int(val)
    return None


def _body_signature(block) -> tuple:
    """A generic's body as structure: per op its name, attributes, result types and where each
    operand comes from (an argument of the body, an earlier op's result, or a value from outside,
    by identity), so clones compare equal. Printing each op instead (`str(op)`) numbered every
    value of the enclosing function per op: a third of a BERT layer's pass time."""
    index: dict = {}
    out = []
    for i, op in enumerate(block.operations):
        op = op.operation
        index[op] = i
        if len(op.regions):  # nested regions: the op's own text (rare in a pointwise body)
            text = str(op)
            out.append(text.split(" = ", 1)[1] if " = " in text.split("(")[0] else text)
            continue
        refs = []
        for w in op.operands:
            owner = w.owner
            if isinstance(owner, ir.Block):
                refs.append(("arg", ir.BlockArgument(w).arg_number) if owner == block else ("ext", w))
            else:
                j = index.get(owner.operation if hasattr(owner, "operation") else owner)
                refs.append(("op", j, ir.OpResult(w).result_number) if j is not None else ("ext", w))
        attrs = tuple((k, str(op.attributes[k])) for k in op.attributes)
        out.append((op.name, attrs, tuple(refs), tuple(str(r.type) for r in op.results)))
    return tuple(out)


def _contains(e, sub) -> bool:
    if e == sub:
        return True
    return isinstance(e, tuple) and any(isinstance(x, tuple) and _contains(x, sub) for x in e[1:])


def _is_exp(e, x) -> bool:
    """e == exp(x - max(x))."""
    return (len(e) == 2 and e[0] == "math.exp" and e[1][0] == "arith.subf" and e[1][1] == x
            and e[1][2][0] == "reduce" and e[1][2][1] in _MAX and e[1][2][2] == x)


def _is_softmax(e, x) -> bool:
    """e == exp(x - max x) / sum(exp(x - max x))."""
    return (e[0] == "arith.divf" and len(e) == 3 and _is_exp(e[1], x) and e[2][0] == "reduce"
            and e[2][1] == "arith.addf" and e[2][2] == e[1])


def _core(e):
    return e[3] if e[0] == "arith.select" and len(e) == 4 else e


_OEQ = 1  # arith.cmpf predicate "oeq"


def _is_safe(e, x) -> bool:
    """e == select(all(x == -inf), 0, softmax(x)) (x may be compared before or after widening)."""
    if e[0] != "arith.select" or len(e) != 4 or e[2] != ("const", 0.0) or not _is_softmax(e[3], x):
        return False
    cond = e[1]
    if cond[0] != "reduce" or cond[1] != "arith.andi":
        return False
    cmp = cond[2]
    if cmp[0] != "arith.cmpf" or cmp[1] != _OEQ:
        return False
    inner = x[1] if x[0] == "arith.extf" else x
    return cmp[3] == ("const", float("-inf")) and cmp[2] in (x, inner, ("arith.extf", inner))
