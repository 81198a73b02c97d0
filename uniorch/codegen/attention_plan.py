"""Attention kernels, analysis: the two contractions of an attention group and how their loops
correspond (passes/fuse_attention.py decides with `check_pair`; attention.py emits from `AttnPlan`).

scores `S = epilogue(q·kᵀ)` come from contraction 1, whose loops classify (contraction_plan) as
batch, M = queries, N = keys (exactly one dim), K = head dim; the output `P·v` is contraction 2,
whose A side reads the probabilities `P = softmax(S)` and whose loops are batch, M = queries,
N = v's head dim, K = keys. Both must agree: same batch and query extents in the same order, and
`P` read by contraction 2 at the position `S` was computed at by contraction 1 (query, key and
batch dims matched by role). The keys are tiled (online softmax); both head dims are held whole
in registers, hence MAX_HEAD_DIM.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from torch_mlir import ir

from .contraction_ir import Lin, _as_op, _lin, _maps, _producer, _shape
from .contraction_plan import _classify, _Plan, epilogue_layouts, expand_source_index
from .source import CodegenError

MAX_HEAD_DIM = 256


@dataclass
class AttnPlan:
    p1: _Plan        # scores: results = [S]
    p2: _Plan        # output: results = the kernel's results
    scores: object   # S
    probs: object    # P
    safe: bool
    chain: bool = False  # passes/fuse_chain.py: no softmax, P is S (a hidden activation)
    up: "_Plan | None" = None  # a gated chain's up product (passes/fuse_chain.py `uniorch.chain_up`)
    lead: object = None  # a chain's lead product (chain_lead.py `Lead`), or None
    score_loads: bool = False  # the score epilogue reads a tensor from memory (a mask, a bias)
    lse: list = field(default_factory=list)  # [(kernel result, layout)]: the scores' log-sum-exp (attention.py)


def _plan(gen, func=None, name="", args=(), results=()) -> _Plan:
    return _Plan(func, name, list(args), list(results), **_classify(gen))


def _roles(plan: _Plan, key_class: str) -> dict:
    """loop dim -> (role, position): batch and query dims by position, the key dim as 'key'."""
    out = {}
    for c in "bm":
        for i, d in enumerate(plan.order[c]):
            out[d] = (c, i)
    for d in plan.order[key_class]:
        out[d] = ("key", 0)
    return out


def _role_of(lin: Lin, roles: dict):
    """A dim of S or P as roles: ("unit", c), a role, or for dims merged from several batch dims
    (heads split into key-value groups) the roles with their coefficients."""
    if lin.is_const():
        return ("unit", lin.const)
    if len(lin.terms) == 1 and lin.terms[0][1] == 1 and not lin.const:
        return roles.get(lin.terms[0][0])
    if lin.const or any(roles.get(d, ("?",))[0] != "b" for d, _ in lin.terms):
        return None
    return ("merged", tuple(sorted((roles[d], c) for d, c in lin.terms)))


def analyze_pair(c1, scores, probs, c2, ops) -> tuple[_Plan, _Plan]:
    """The two contraction plans (p1 with S's layout among its layouts), or CodegenError."""
    c1, c2 = _as_op(c1), _as_op(c2)
    p1, p2 = _plan(c1), _plan(c2)
    if len(p1.order["n"]) != 1 or len(p2.order["k"]) != 1:
        raise CodegenError(c1, "attention needs exactly one key dimension")
    if not isinstance(p1.K, int) or not isinstance(p2.N, int) or p1.K > MAX_HEAD_DIM or p2.N > MAX_HEAD_DIM:
        # a head dim that is a symbolic size has no bound to hold in registers by
        raise CodegenError(c2, f"head dims {p1.K} and {p2.N}: at most {MAX_HEAD_DIM} are held in registers")
    if len(p2.order["n"]) != 1 or len(p1.order["k"]) != 1:
        raise CodegenError(c2, "attention needs one head dimension for q·k and one for v")
    if p1.N != p2.K:
        raise CodegenError(c2, f"{p1.N} keys for the scores but {p2.K} for the values")
    rows = differing_rows(p1, p2)
    if rows is not None:
        raise CodegenError(c2, f"{rows[0]} dims {rows[1]} and {rows[2]} differ")
    if not p2.order["m"]:
        raise CodegenError(c2, "attention with no query dimension")
    layouts = epilogue_layouts(p1, score_chain(c1, scores, ops))
    lay_s = next((lay for v, lay in layouts.items() if v == scores), None)
    if lay_s is None:
        raise CodegenError(c1, "the scores are not computed over q·kᵀ's output")
    # P must be contraction 2's A-side factor, read straight from its input, or through a split of
    # batch dims (heads into key-value groups: GQA's softmax runs over the merged heads)
    n_in = p2.n_in
    inputs = list(c2.opview.inputs)
    pos = [i for i, v in enumerate(inputs) if v == probs]
    split = _producer(probs)
    if split is not None and split.name == "tensor.expand_shape" and _shape(split.operands[0]) == _shape(scores):
        split_shape = _shape(split.operands[0])
    else:
        split, split_shape = None, _shape(probs)
    if len(pos) != 1:
        raise CodegenError(c2, "the probabilities are not one input of P·v")
    x = p2.x
    px = _producer(x)
    if px is not None and px.name == "arith.extf":
        x = px.operands[0]
    if not isinstance(x.owner, ir.Block) or ir.BlockArgument(x).arg_number != pos[0]:
        raise CodegenError(c2, "P·v does not multiply the probabilities as they are")
    if split_shape != _shape(scores):
        raise CodegenError(c2, "the probabilities and the scores have different shapes")
    env = [Lin.cst(0) if p2.cls[d] == "u" else Lin.dim(d) for d in range(len(p2.sizes))]
    read = [_lin(e, env, c2) for e in p2.maps[pos[0]].results]
    if split is not None:
        read = list(expand_source_index(tuple(read), split))
    r1, r2 = _roles(p1, "n"), _roles(p2, "k")
    for j, (a, b) in enumerate(zip(lay_s, read)):
        ra, rb = _role_of(a, r1), _role_of(b, r2)
        if ra is None or ra != rb:
            raise CodegenError(c2, f"dim {j} of the probabilities is not read where its score was computed")
    if n_in != len(inputs):
        raise CodegenError(c2, "unexpected operands")
    return p1, p2


def differing_rows(pa: _Plan, pb: _Plan):
    """("batch" | "query", pa's sizes, pb's) for the first class of batch or row dims whose extents
    differ between two plans (in order), or None when each tile of rows is the same in both."""
    for c in "bm":
        a = [pa.sizes[d] for d in pa.order[c]]
        b = [pb.sizes[d] for d in pb.order[c]]
        if a != b:
            return ("batch" if c == "b" else "query", a, b)
    return None


def score_chain(c1, scores, ops) -> list:
    """The ops of `ops` (in their order) that `scores` is computed from, from contraction 1 on."""
    ops = [_as_op(o) for o in ops]
    need, stack = [], [scores]
    while stack:
        v = stack.pop()
        p = _producer(v)
        if p is None or any(p == n for n in need):
            continue
        top = p
        while top.parent is not None and not any(top == o for o in ops):
            top = _as_op(top.parent)
        if not any(top == o for o in ops) or any(top == n for n in need):
            continue
        need.append(top)
        if top == _as_op(c1):
            continue
        stack.extend(top.operands)
    return [o for o in ops if any(o == n for n in need)]


def check_pair(c1, scores, probs, c2) -> str | None:
    """Why these two contractions cannot be one attention kernel, or None (for the fusion pass)."""
    try:
        analyze_pair(c1, scores, probs, c2, _following(c1))
    except CodegenError as err:
        return str(err)
    except (ValueError, KeyError, IndexError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def _following(op) -> list:
    """`op` and the ops after it in its block."""
    op = _as_op(op)
    block = op.parent.regions[0].blocks[0] if op.parent is not None else None
    ops = [o.operation for o in block.operations] if block is not None else [op]
    i = next(i for i, o in enumerate(ops) if o == op)
    return ops[i:]
