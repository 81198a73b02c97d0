"""Attention kernels: flash attention (online softmax over key tiles) for a group of kind
"attention" (passes/fuse_attention.py), so the T x T scores and probabilities never leave registers.

One program per (BLOCK_M queries, batch index). The q tile is loaded once; for each tile of
BLOCK_N keys the scores come from `tl.dot(q, kᵀ)` and the group's own score epilogue (scale,
masks, biases: evaluated by the contraction emitter at the tile's query and key indices); then

    m_new = max(m, rowmax(s));  p = exp(s - m_new);  l = l·exp(m - m_new) + rowsum(p)
    acc = acc·exp(m - m_new) + p·v

and after the last tile `out = acc / l`, followed by the epilogue of P·v (casts, ...). A row whose
scores are all -inf gives 0/0 = NaN, as `torch.softmax` does; SDPA's safe softmax gives 0 there,
so its kernels test `l == 0`. Subtracting 0 instead of -inf keeps exp() off -inf - -inf.
Softmax statistics are fp32; p goes to the second dot in the type the probabilities had (16-bit
models round them, as eager does).

Both head dims are held whole (BLOCK_D, BLOCK_V: powers of two up to 256, masked to the true
size); key tiles are masked to T, so T need not be a multiple of the tile.
"""
from __future__ import annotations

import collections

import re

from torch_mlir import ir

from uniorch.ir import dims

from . import body as _body
from .attention_plan import AttnPlan, _plan, analyze_pair
from .causal_bound import band_predicates, causal_offset, zero_band
from .chain_lead import DEPTHWISE_RENAME, LEAD, depthwise_lines, depthwise_product, lead_of
from .contraction_emit import _Emitter, _Val
from .contraction_ir import _TL, Lin, _as_op, kernel_parts, _elem, _iterators, _lit, _loc, _shape
from .contraction_plan import ROW_STAT, _get, _known, epilogue_layouts, widened_from
from .contraction_schedule import _pow2, _target_kind
from .fma_relayout import fma_relayout
from .patterns import attention_precision, dot_precision, exact_fp32, recorded_schedule
from .source import CodegenError, KernelSource, kernel_ident, symbol_dims, tensor_params

SCORES, ATTENTION = "uniorch.attention_scores", "uniorch.attention"
LSE = "uniorch.attention_lse"  # passes/fuse_attention.py: this result of the op is the scores' log-sum-exp
HIDDEN, CHAIN, UP = "uniorch.chain_hidden", "uniorch.chain", "uniorch.chain_up"  # passes/fuse_chain.py


def _analyze(kernel) -> AttnPlan:
    func, name, args, ops = kernel_parts(kernel)
    ret = ops[-1]
    chain = any(CHAIN in o.attributes for o in ops)
    anchor, value = (CHAIN, HIDDEN) if chain else (ATTENTION, SCORES)
    c2s = [o for o in ops if anchor in o.attributes]
    s_ops = [o for o in ops if value in o.attributes]
    if len(c2s) != 1 or len(s_ops) != 1:
        what = "second contraction and one hidden op" if chain else "P·v contraction and one scores op"
        raise CodegenError(func, f"a {'chain' if chain else 'attention'} kernel needs one {what}")
    c2, s_op = c2s[0], s_ops[0]
    scores = s_op.results[ir.IntegerAttr(s_op.attributes[value]).value]
    safe = not chain and bool(ir.BoolAttr(ir.DictAttr(c2.attributes[ATTENTION])["safe"]).value)
    c1s = [o for o in ops if o.name == "linalg.generic" and "reduction" in _iterators(o) and o != c2
           and ROW_STAT not in o.attributes and UP not in o.attributes and LEAD not in o.attributes
           and _in_chain(o, scores)]
    if len(c1s) != 1:
        raise CodegenError(func, "the scores do not come from one q·kᵀ contraction")
    # a chain's second product reads the hidden activation itself
    probs = [scores] if chain else [v for v in c2.opview.inputs if not isinstance(v.owner, ir.Block)]
    err = None
    for pv in probs:
        try:
            p1, p2 = analyze_pair(c1s[0], scores, pv, c2, ops)
        except CodegenError as e:
            err = e
            continue
        p1.func, p1.name, p1.args, p1.results = func, name, args, [scores]
        score_ops = _chain_ops(ops, c1s[0], scores)
        p1.layouts = epilogue_layouts(p1, score_ops)
        p2.func, p2.name, p2.args, p2.results = func, name, args, list(ret.operands)
        p2.layouts = epilogue_layouts(p2, ops)
        lse = _lse_results(ops, list(ret.operands), scores, p1)
        p2.apart = [r for r, _ in lse]
        for r in p2.results:
            if any(r == a for a in p2.apart):
                continue
            if not _known(p2.layouts, r):
                raise CodegenError(func, "an attention kernel's result is not computed from P·v")
            want = sorted(d for d, c in p2.cls.items() if c in "bmn")
            got = sorted(d for lin in _get(p2.layouts, r) for d in lin.dims())
            if got != want:
                raise CodegenError(func, "an attention kernel's result does not cover P·v's output once")
        lead = lead_of(ops, p1) if chain else None
        # a kernel argument (not q or k: those only q·kᵀ reads) read by the score epilogue
        loads = any(isinstance(v.owner, ir.Block) and isinstance(v.type, ir.RankedTensorType)
                    and any(d != 1 for d in ir.RankedTensorType(v.type).shape)
                    for o in score_ops if _as_op(o) != _as_op(c1s[0]) for v in o.operands)
        return AttnPlan(p1, p2, scores, pv, safe, chain, _up_plan(ops, p1), lead, loads, lse)
    raise err or CodegenError(func, "no probabilities input for P·v")


def _lse_results(ops, results: list, scores, p1) -> list:
    """[(kernel result, its layout)] for the results that are the scores' log-sum-exp over the keys
    (passes/fuse_attention.py `uniorch.attention_lse`), or a unit-dim view of it: laid out as the
    scores' rows, each dim a Lin over q·kᵀ's loops."""
    values = [o.results[ir.IntegerAttr(o.attributes[LSE]).value] for o in ops if LSE in o.attributes]
    if not values:
        return []
    s_shape, s_lay = _shape(scores), _get(p1.layouts, scores)
    rows = [(lin, n) for lin, n in zip(s_lay, s_shape) if n != 1]
    keys = rows[-1][0].dims() if rows else set()
    if len(keys) != 1 or p1.cls.get(next(iter(keys))) != "n":
        raise CodegenError(_as_op(values[0].owner), "the log-sum-exp is not over the scores' keys")
    rows = rows[:-1]
    out = []
    for r in results:
        v = r
        while not any(v == x for x in values) and not isinstance(v.owner, ir.Block) \
                and _as_op(v.owner).name in ("tensor.expand_shape", "tensor.collapse_shape"):
            v = _as_op(v.owner).operands[0]
        if not any(v == x for x in values):
            continue
        if _elem(r) != "f32":
            raise CodegenError(_as_op(r.owner), f"a log-sum-exp stored as {_elem(r)} (the kernel's is float32)")
        lay, it = [], iter(rows)
        for n in _shape(r):
            if n == 1:
                lay.append(Lin.cst(0))
                continue
            lin, m = next(it, (None, None))
            if lin is None or m != n:
                raise CodegenError(_as_op(r.owner), "a log-sum-exp not laid out as the scores' rows")
            lay.append(lin)
        if next(it, None) is not None:
            raise CodegenError(_as_op(r.owner), "a log-sum-exp not laid out as the scores' rows")
        out.append((r, tuple(lay)))
    return out


def _up_plan(ops, p1):
    """A gated chain's second first product (passes/fuse_chain.py `uniorch.chain_up`): a plan with
    the gate's loops, so both products share the tiles' index names; or None."""
    ups = [o for o in ops if UP in o.attributes]
    if not ups:
        return None
    if len(ups) > 1:
        raise CodegenError(p1.func, "a chain with more than one up product")
    pu = _plan(ups[0], p1.func, p1.name, p1.args, [ups[0].results[0]])
    if (pu.sizes != p1.sizes or pu.cls != p1.cls or pu.order != p1.order
            or [str(m) for m in pu.maps] != [str(m) for m in p1.maps]):
        raise CodegenError(ups[0], "the up product's loops differ from the gate's")
    pu.layouts = epilogue_layouts(pu, [])
    return pu


def _in_chain(op, *values) -> bool:
    """Whether any of `values` is computed from `op` (through top-level producers), the nearest
    producers looked at first. The walk stops at ops before `op` in its function's block (MLIR's
    own order, cached in the block): nothing they are computed from comes after them. Unbounded,
    fuse-chain's checks walked a whole decoder per gated MLP."""
    op = _as_op(op)
    func = op.parent if op.parent is not None and op.parent.name == "func.func" else None
    seen, stack = set(), collections.deque(values)
    while stack:
        w = stack.popleft()
        if isinstance(w.owner, ir.Block):
            continue
        p = _as_op(w.owner)
        if p == op:
            return True
        if p in seen:
            continue
        seen.add(p)
        if func is not None and p.parent == func and p.is_before_in_block(op):
            continue
        stack.extend(p.operands)
    return False


def _chain_ops(ops, c1, scores):
    from .attention_plan import score_chain

    return score_chain(c1, scores, ops)


def _schedule(plan: AttnPlan, target: str) -> dict:
    kind, warp = _target_kind(target)
    p1, p2 = plan.p1, plan.p2
    hints = dims.hints(p1.func)  # symbolic sizes: tiles for the capture's sizes
    M, N1, K1, N2 = (dims.hinted(x, hints) for x in (p1.M, p1.N, p1.K, p2.N))
    if not isinstance(p1.K, int) or not isinstance(p2.N, int):
        raise CodegenError(p1.func, "attention with a symbolic head dim is not supported")
    bd, bv = max(16, _pow2(K1)), max(16, _pow2(N2))
    if kind == "interpret":
        bm, bn, warps, stages = min(64, max(16, _pow2(M))), min(64, max(16, _pow2(N1))), 4, 1
    else:
        big = max(bd, bv) > 64
        # tiles for the dots the kernel will run: SDPA's math widens 16-bit q, k and v to float32,
        # and build() narrows them back, so the plan's own types would say FMA where tensor cores
        # run (Llama's bf16 attention at head dim 128 took FMA's 32x32 tiles: 0.36 ms on an H200
        # against cuDNN's 0.05)
        qk_types = tuple(_qk_types(p1, p2))
        fp32_mode = _precision(plan, "f32", target)
        fp32_qk = exact_fp32(p1.func, qk_types) and "ieee" in fp32_mode
        x3 = all(t == "f32" for t in qk_types) and "tf32x3" in fp32_mode
        # tensor-core dots up to head dim 128 take FlashAttention-2's 128-query tiles: on sm_90
        # Llama's bf16 attention (head dim 128, k rotated in its load: four tiles per key step)
        # takes 206 registers there at 128x64 and 8 warps, no spill (Triton 3.6's ptxas)
        wide = not fp32_qk and max(bd, bv) <= 128 and plan.up is None and plan.lead is None
        bm = 128 if M >= 128 and (wide or not big) else 64 if big else max(16, _pow2(M))
        bn = 32 if max(bd, bv) > (64 if plan.up is not None else 128) else 64  # two B tiles per step
        bn = min(bn, max(16, _pow2(N1)))
        warps = max(1, (8 if bm >= 128 or big else 4) * 32 // warp)
        stages = 2 if kind == "rocm" else 3
        if big and x3:
            # 3xTF32 holds q's two TF32 halves across the key loop: Llama's fp32 attention (head
            # dim 128, k rotated in its load) spilled 844 bytes a thread at 128x64 on sm_90 (Triton
            # 3.6's ptxas), 16 at 128x32
            bn = min(bn, 32)
        if big and fp32_qk:
            # FMA dots hold a thread's share of the whole head dim: at 64x64 tiles over 128 dims,
            # Triton 3.6's ptxas spilled 16 KB a thread (sm_90), and H200 run 5's llama_block fp32
            # attention took 23.5 ms; 32x32 spills 0.5 KB
            bm, bn = min(bm, 32), min(bn, 32)
        elif fp32_qk and not plan.chain and bm >= 128 and len(_outputs(p2)) > 1:
            # P·v stored twice (a training forward saves SDPA's output in its own layout beside the
            # one the next matmul reads): at 128x64 and 8 warps Triton 3.6's ptxas spilled 1.3 KB a
            # thread inside the key loop on sm_90 (gpt2_block_train's fp32 attention, 255
            # registers); 64x64 at 4 warps takes 226 and spills nothing
            bm, warps = 64, max(1, 4 * 32 // warp)
        elif plan.chain and all(t == "f32" for t in qk_types) and (plan.up is not None or min(M, N1) >= 512):
            # float32 first products over long rows and a long hidden loop: an attention backward
            # (dV from Sᵀ = k·qᵀ; dK and dQ with a second product dP = dO·vᵀ from its own row
            # tile). At 128x64 and 8 warps Triton 3.6's ptxas spilled 0.9-2.8 KB a thread on sm_90
            # (nanoGPT's attention at head dim 64, T 1024, both forms), at 64x64 and 4 warps as
            # much, at 64x32 and 8 warps 16-56 bytes once the causal bounds came in; 64x16 at 8
            # warps takes 66-118 registers and spills nothing (32x32 at 8 warps: 48-76)
            bm, bn, warps = 64, min(bn, 16), max(1, 8 * 32 // warp)
            if "tf32x3" in dot_precision(p1.func, "f32"):
                # 3xTF32 on tensor cores (the chains of an attention backward take the attention's
                # precision: patterns.recomputes_probabilities). On sm_90 (Triton 3.6's ptxas) at
                # head dim 64, 128x32 at 8 warps takes 143-186 registers and spills nothing (GPT-2's
                # and nanoGPT's steps; 64x64 reaches 255); at 128 (Llama's), 64x32 takes 241-247,
                # where 64x16 spilled 80-332 bytes and 32x32 at 4 warps 44
                bm, bn = (128 if M >= 128 and not big else 64), min(32, max(16, _pow2(N1)))
        elif plan.score_loads and not plan.chain and bm >= 128 and fp32_qk:
            # a mask or bias added to FMA scores (BERT's padding mask): at 128x64 and 8 warps
            # Triton 3.6's ptxas spilled 972 bytes a thread on sm_90 (255 registers; 166 without
            # the mask); 128x32 at 4 warps takes 192 and spills nothing
            bn, warps = min(bn, 32), max(1, 4 * 32 // warp)
    out = {"block_m": bm, "block_n": bn, "block_d": bd, "block_v": bv, "num_warps": warps,
           "num_stages": stages, "grid": [dims.grid_entry(dims.cdiv(p1.M, bm)), dims.grid_entry(p1.B), 1]}
    if plan.lead is not None and not plan.lead.depthwise:  # the lead product's K tile (chain_lead.py): beside x's tile and W0's
        k0 = max(16, _pow2(dims.hinted(plan.lead.plan.K, hints)))
        out["block_l"] = min(k0, 64 if kind == "interpret" or bd <= 128 else 32)
    return out


def choose_schedule(kernel, target: str) -> dict:
    return _schedule(_analyze(kernel), target)


def _with_recorded(plan: AttnPlan, s: dict) -> dict:
    """`s` with the tiles, warps and stages recorded on the kernel, when they differ: a kernel
    refitted to the device's shared memory (runtime/resources.py) is generated again from them."""
    recorded = recorded_schedule(plan.p1.func) or {}
    keys = ("block_m", "block_n", "num_warps", "num_stages")
    if all(recorded.get(k, s[k]) == s[k] for k in keys):
        return s
    s = dict(s, **{k: int(recorded[k]) for k in keys if k in recorded})
    for k in ("block_m", "block_n"):
        if s[k] < 16 or s[k] & (s[k] - 1):
            raise CodegenError(plan.p1.func, f"schedule {k} = {s[k]} (tl.dot needs a power of two >= 16)")
    s["grid"] = [dims.grid_entry(dims.cdiv(plan.p1.M, s["block_m"])), dims.grid_entry(plan.p1.B), 1]
    return s


class _Part(_Emitter):
    """One contraction of the pair, emitting into the flash kernel's sections. `rename` maps the
    contraction emitter's index and mask names onto the kernel's (its N is the keys for q·kᵀ, the
    v head dim for P·v); `tag` keeps the two parts' temporaries apart."""

    def __init__(self, plan, sched, target, tag: str, sections: dict, rename: dict):
        super().__init__(plan, sched, target)
        self.tag, self.sections, self.rename = tag, sections, rename
        self.accs: list = []  # (contraction, accumulator name): other products of the same tile
        # (chain_lead.Lead, the one context it is read in): x from the lead's register tile, the
        # hidden product's A tile ("a": its columns are K) or the output's epilogue ("e": N)
        self.held = None

    def _value(self, v, idx, ctx) -> _Val:
        if self.held is not None and v == self.held[0].x:
            lead, where = self.held
            key = {"a": "k", "e": "n"}[where]
            if ctx != where or not lead.read_at(self.p, idx, key):
                raise CodegenError(_as_op(v.owner), "the chain reads its lead's output other than as the tile held")
            return _Val("xl", lead.ty, frozenset({"m", key}))
        if not isinstance(v.owner, ir.Block):
            op = _as_op(v.owner)
            for gen, name in self.accs:
                if op == gen:
                    if ctx != "e" or idx != self.p.acc_layout:
                        raise CodegenError(op, "the up product is read at a position other than the one computed")
                    ty = _elem(v)
                    text = name if ty == self.acc_ty else f"{name}.to({_TL[ty]})"
                    return _Val(self.line("e", {"m", "n"}, text, "c"), ty, frozenset({"m", "n"}))
        return super()._value(v, idx, ctx)

    def fresh(self, prefix: str) -> str:
        return super().fresh(self.tag + prefix)

    def block(self, ctx: str, cls) -> list[str]:
        if ctx not in self.sections:
            raise CodegenError(self.p.gen, f"attention kernels have no {ctx!r} section here")
        if ctx in ("a", "b") and "k" not in cls and "hoist" in self.sections:
            return self.sections["hoist"]  # a depthwise lead's operand code not along the taps
        return self.sections[ctx]

    def text(self, lines: list[str]) -> list[str]:
        return [self.rename_text(ln) for ln in lines]

    def rename_text(self, text: str) -> str:
        return re.sub(r"\b(acc|mask_[a-z]+|bt\d+|m\d+|n\d+|ka\d+|kb\d+|BLOCK_[NK])\b",
                      lambda m: self.rename.get(m.group(1), _indexed(self.rename, m.group(1))), text)


def _indexed(rename: dict, name: str) -> str:
    m = re.fullmatch(r"([a-z]+)(\d+)", name)
    if m and m.group(1) in rename:
        return rename[m.group(1)] + m.group(2)
    return name


def generate_attention(kernel, target: str) -> KernelSource:
    plan = _analyze(kernel)
    s = _with_recorded(plan, _schedule(plan, target))
    return _Flash(plan, s, target).build()


class _Flash:
    def __init__(self, plan: AttnPlan, s: dict, target: str):
        self.plan, self.s, self.target = plan, s, target
        self.interpret = _target_kind(target)[0] == "interpret"
        from .contraction_emit import _vendor

        # as contraction_emit: bf16 dot operands widened on the interpreter and the cpu backend
        self.widen_bf16 = self.interpret or _vendor(target) == "cpu"
        self.q, self.k, self.sc = [], [], []      # before the key loop; per key tile: k, scores
        self.v, self.out = [], []                 # per key tile: v; after the loop: the epilogue
        s1 = {"block_m": s["block_m"], "block_n": s["block_n"], "block_k": s["block_d"]}
        s2 = {"block_m": s["block_m"], "block_n": s["block_v"], "block_k": s["block_n"]}
        self.e1 = _Part(plan.p1, s1, target, "s_", {"a": self.q, "b": self.k, "e": self.sc, "init": self.sc},
                        {"acc": "qk", "mask_n": "mask_j", "mask_ka": "mask_da", "mask_kb": "mask_db",
                         "n": "j", "ka": "da", "kb": "db", "BLOCK_K": "BLOCK_D"})
        self.eu = None
        if plan.up is not None:  # a gated chain's up product: same tiles as the gate's, own names
            self.eu = _Part(plan.up, s1, target, "u_", {"a": self.q, "b": self.k, "e": self.sc, "init": self.sc},
                            dict(self.e1.rename))
            self.e1.accs.append((plan.up.gen, "accu"))
        self.e2 = _Part(plan.p2, s2, target, "o_", {"b": self.v, "e": self.out, "init": self.out},
                        {"mask_n": "mask_v", "mask_kb": "mask_jb", "n": "v", "kb": "jb", "BLOCK_K": "BLOCK_N",
                         "BLOCK_N": "BLOCK_V"})
        self.e0 = None
        self.lead_pre, self.lead_loop, self.lead_post = [], [], []  # the lead product (chain_lead.py)
        if plan.lead is not None:
            s0 = {"block_m": s["block_m"], "block_n": s["block_d"], "block_k": s.get("block_l", 1)}
            rename = {"acc": "lacc", "n": "dn", "mask_n": "mask_dn", "ka": "la", "kb": "lb",
                      "mask_ka": "mask_la", "mask_kb": "mask_lb", "BLOCK_K": "BLOCK_L", "BLOCK_N": "BLOCK_D"}
            sections = {"a": self.lead_loop, "b": self.lead_loop, "e": self.lead_post, "init": self.lead_pre}
            if plan.lead.depthwise:  # its N is the chain's rows, one tap per step
                s0, rename = {"block_m": 1, "block_n": s["block_m"], "block_k": 1}, DEPTHWISE_RENAME
                sections["hoist"] = self.lead_pre
            self.e0 = _Part(plan.lead.plan, s0, target, "l_", sections, rename)
            for part in (self.e1, self.eu):
                if part is not None:
                    part.held = (plan.lead, "a")
            self.e2.held = (plan.lead, "e")

    def dot_operands(self, part: _Part, a: _Val, b: _Val, lines_a, lines_b) -> tuple[str, str, str, str]:
        ta, tb = part.p.dot_types
        if "f64" in (ta, tb):
            dt = "f64"
        elif ta == tb and ta in ("f16", "bf16") and not (self.widen_bf16 and ta == "bf16"):
            dt = ta
        else:
            dt = "f32"
        at = a.text if a.ty == dt else part.line("a", {"k"}, f"{a.text}.to({_TL[dt]})", "a")
        bt = b.text if b.ty == dt else part.line("b", {"k"}, f"{b.text}.to({_TL[dt]})", "b")
        attention_dot = part in (self.e1, self.e2)
        prec = _precision(self.plan, dt, self.target) if attention_dot else dot_precision(self.plan.p1.func, dt)
        return at, bt, dt, prec

    def build(self) -> KernelSource:
        p1, p2, s = self.plan.p1, self.plan.p2, self.s
        e1, e2 = self.e1, self.e2
        lead_types = self.plan.lead.plan.dot_types if self.plan.lead is not None else ()
        acc_ty = "f64" if "f64" in p1.dot_types + p2.dot_types + lead_types else "f32"
        e1.acc_ty = e2.acc_ty = acc_ty
        acc_tl = _TL[acc_ty]
        if self.e0 is not None:
            self.lead(acc_ty)
        # scores: q (hoisted), k per tile, the dot, the score epilogue
        types = _qk_types(p1, p2)
        narrow_qk = types[0] == types[1] and types[0] in ("f16", "bf16") \
            and not (self.widen_bf16 and types[0] == "bf16")  # the interpreter multiplies bf16 in float32
        qk_scale = _score_scale(p1) if narrow_qk else None
        moved = narrow_qk
        if not narrow_qk and types == ["f32", "f32"] and any(sc is not None for sc in p1.f32_scaled):
            # float32 q and k scaled by constants (SDPA's sqrt(scale) on each): the product on the
            # scores instead. A k tile scaled in the key loop is a second copy of the tile in
            # registers: gpt2_block's causal fp32 attention spilled on sm_90 (Triton 3.6's ptxas:
            # 1.8 KB a thread) and took 1.66 ms on an H200, against 0.89 ms for the benchmark's
            # attention row (the scale on its scores, 4/3 the heads, twice the keys per query)
            p1.dot_scaled, moved = p1.f32_scaled, True
            qk_scale = _score_scale(p1)
        qa = e1.operand("a", unscaled=moved)
        kb = e1.operand("b", unscaled=moved)
        if narrow_qk:
            p1.dot_types = tuple(types)
        qt, kt, e1.dot_dt, prec1 = self.dot_operands(e1, qa, kb, self.q, self.k)
        init = e1.value(p1.gen.opview.outputs[0], p1.acc_layout, "init")
        if init.const is None:
            raise CodegenError(p1.gen, "q·kᵀ's accumulator starts from a tensor, not a constant")
        self.k.append(f"acc = {_body.full_expr('(BLOCK_M, BLOCK_N)', _lit(init.const, acc_ty), acc_tl)}")
        self.k.append(f"acc = tl.dot({qt}, {kt}, acc{prec1})")
        if qk_scale is not None:
            self.k.append("# the constants that scaled q and k, on the scores instead: q and k go to the dot as loaded")
            self.k.append(f"acc = acc * {qk_scale!r}")
        if self.eu is not None:
            eu = self.eu
            eu.acc_ty = acc_ty
            ua, ub = eu.operand("a"), eu.operand("b")
            ut, uwt, _, precu = self.dot_operands(eu, ua, ub, self.q, self.k)
            init_u = eu.value(eu.p.gen.opview.outputs[0], eu.p.acc_layout, "init")
            if init_u.const is None:
                raise CodegenError(eu.p.gen, "the up product's accumulator starts from a tensor, not a constant")
            self.k.append("# the up product of the same tile (a gated MLP)")
            self.k.append(f"accu = {_body.full_expr('(BLOCK_M, BLOCK_N)', _lit(init_u.const, acc_ty), acc_tl)}")
            self.k.append(f"accu = tl.dot({ut}, {uwt}, accu{precu})")
            e1.need |= eu.need
        init2 = e2.value(p2.gen.opview.outputs[0], p2.acc_layout, "init")
        if init2.const is None or float(init2.const) != 0.0:
            raise CodegenError(p2.gen, "P·v's accumulator does not start from zero")
        sv = e1.value(self.plan.scores, _get(p1.layouts, self.plan.scores), "e")
        # float64 scores (a float64 model) keep float64, their softmax statistics too: eager computes
        # in double there; otherwise the statistics are float32 (opmath)
        self.stat_ty = "f64" if sv.ty == "f64" and acc_ty == "f64" else "f32"
        s_text = sv.text if sv.ty == self.stat_ty else f"{sv.text}.to({_TL[self.stat_ty]})"
        if set(sv.cls) != {"m", "n"}:
            s_text = f"tl.broadcast_to({s_text}, (BLOCK_M, BLOCK_N))"
        # values: P·v's B side per key tile
        vb = e2.operand("b")
        pty = p2.dot_types[0]
        if pty == "f32":
            pty = widened_from(self.plan.probs) or pty  # a 16-bit softmax's output, widened
        narrow_v = p2.dot_types[1] if p2.dot_types[1] in ("f16", "bf16") else None
        if pty == "f32" and narrow_v and all(_elem(r) == narrow_v for r in _outputs(p2)):
            # float32 probabilities (SDPA's math in float32) times 16-bit values into a 16-bit
            # output: p goes to the tensor cores in 16 bits, as every fused SDPA kernel of eager
            # does; its rounding (2**-9 relative) is below the output's own
            pty = narrow_v
        dt2 = "f64" if acc_ty == "f64" else (pty if pty in ("f16", "bf16") and narrow_v == pty
                                              and not (self.widen_bf16 and pty == "bf16") else "f32")
        vt = vb.text if vb.ty == dt2 else e2.line("b", {"k"}, f"{vb.text}.to({_TL[dt2]})", "b")
        p_text = "p"
        if pty in ("f16", "bf16"):  # the probabilities are stored in 16 bits by eager: round p too
            p_text = f"p.to({_TL[pty]})" if dt2 == pty else f"p.to({_TL[pty]}).to({_TL[dt2]})"
        elif dt2 != "f32":
            p_text = f"p.to({_TL[dt2]})"
        prec2 = _precision(self.plan, dt2, self.target)
        stores = e2.stores()
        return self.assemble(s_text, p_text, vt, prec2, stores)

    def lead(self, acc_ty: str) -> None:
        """The lead product's K loop and epilogue, ending in `xl`: x's row tile, zero past its
        width (the hidden product's K, summed whole by x's row statistics)."""
        e0, lead = self.e0, self.plan.lead
        p0 = lead.plan
        e0.acc_ty = acc_ty
        if lead.depthwise:
            product = depthwise_product(e0, acc_ty)
        else:
            at, bt, e0.dot_dt, prec = self.dot_operands(e0, e0.operand("a"), e0.operand("b"), None, None)
            product = f"acc = tl.dot({at}, {bt}, acc{prec})"
        init = e0.value(p0.gen.opview.outputs[0], p0.acc_layout, "init")
        self.lead_pre.append(f"# the lead product ({p0.gen.name} at {_loc(p0.gen)}): x's row tile, computed here")
        self.lead_pre.append(e0._acc_init("acc", init, _TL[acc_ty]))
        self.lead_loop.append(product)
        xv = e0.value(lead.x, _get(p0.layouts, lead.x), "e")
        ty = lead.ty
        if xv.const is not None:
            text = _body.full_expr("(BLOCK_M, BLOCK_N)", _lit(xv.const, ty), _TL[ty])
        else:
            text = xv.text if xv.ty == ty else f"{xv.text}.to({_TL[ty]})"  # rounded as a store would
            if set(xv.cls) != {"m", "n"}:
                text = f"tl.broadcast_to({text}, (BLOCK_M, BLOCK_N))"
        if lead.depthwise:
            text = f"tl.where(mask_dn, {text}, 0.0)"  # its clamped columns (chain_lead.depthwise_lines)
        elif e0.mask_n:
            e0.need.add("mask_n")
            text = f"tl.where(mask_n, {text}, 0.0)"
        self.lead_post.append(f"xl = {text}")

    def lead_lines(self, defined: set) -> list[str]:
        """The lead's section of the kernel body: its own index names, K loop and epilogue."""
        e0, p0 = self.e0, self.plan.lead.plan
        if self.plan.lead.depthwise:
            return depthwise_lines(e0, self.plan.lead, defined, self.lead_pre, self.lead_loop, self.lead_post)
        lines = [ln for c, flat in (("b", "pid_b"), ("m", "offs_m[:, None]")) for ln in e0.index_defs(c, flat)
                 if ln.split(" =")[0] not in defined]
        lines += [e0.rename_text(ln) for ln in e0.index_defs("n", "offs_d[None, :]")]
        if "mask_n" in e0.need:
            lines.append(f"mask_dn = offs_d[None, :] < {p0.N}")
        lines += e0.text(self.lead_pre)
        lines.append(f"for start_l in range(0, {dims.code(p0.K)}, BLOCK_L):")
        inner = ["offs_l = start_l + tl.arange(0, BLOCK_L)"]
        inner += _k_defs(e0, "offs_l", "l", dims.code(p0.K))
        inner += e0.text(self.lead_loop)
        lines += ["    " + ln for ln in inner]
        return lines + e0.text(self.lead_post)

    def lse_stores(self, results: list) -> list[str]:
        """The scores' log-sum-exp per query row from the online softmax: m + log(l), 0 for a row of
        only -inf scores (the form matched: PyTorch's CPU kernel's value, which keeps a backward's
        exp(s - lse) at 0), stored as its rows are laid out."""
        if not self.plan.lse:
            return []
        lines = ["# the scores' log-sum-exp over the keys, from the running max and sum",
                 "lse = tl.where(l_i == 0.0, 0.0, m_i + tl.log(l_i))"]
        mask = f"offs_m[:, None] < {dims.code(self.plan.p1.M)}"
        for res, lay in self.plan.lse:
            r = next(i for i, x in enumerate(results) if x == res)
            terms = [f"{self.e1.lin_text(lin, 'e')} * out{r}_s{j}" for j, lin in enumerate(lay) if not lin.is_const()]
            lines.append(f"# result {r} (f32 {_shape(res)}): the log-sum-exp")
            lines.append(f"tl.store(out{r}_ptr{''.join(' + ' + t for t in terms)}, lse[:, None], mask={mask})")
        return lines

    def _causal_range(self, body: list, loop: list, score_lines: list) -> tuple | None:
        """(first, end, band) of the key loop for a causal mask (codegen/causal_bound.py), or None:
        a flash kernel's keys past the diagonal score -inf; a chain's hidden activation may be 0
        past it (an attention backward's dQ) or before it (dK, dV: rows are keys). `band`, for a
        flash kernel: (c, query index name, key index name), where every score of key > query + c
        is -inf (`_split_at_band`); None for a chain. Not on the interpreter, whose loops need
        Python integers for their bounds (Triton 3.6's)."""
        if self.interpret:
            return None
        queries = [ln.split(" =")[0] for ln in body if ln.split("#")[0].strip().endswith("= offs_m[:, None]")]
        keys = [ln.split(" =")[0] for ln in loop if ln.split("#")[0].strip().endswith("= offs_n[None, :]")]
        if len(queries) != 1 or len(keys) != 1:
            return None
        n = dims.code(self.plan.p1.N)
        if not self.plan.chain:
            c = causal_offset(score_lines, queries[0], keys[0], "qk")
            return None if c is None else ("0", f"tl.minimum({n}, pid_m * BLOCK_M + BLOCK_M + {c})",
                                           (c, queries[0], keys[0]))
        band = zero_band(score_lines, queries[0], keys[0], ("qk", "accu") if self.plan.up is not None else ("qk",))
        if band is None:
            return None
        side, c = band
        if side == "stop":
            return "0", f"tl.minimum({n}, pid_m * BLOCK_M + BLOCK_M + {c})", None
        # a whole tile of hidden columns, so the masks of the last tile stay as they were
        return f"tl.maximum(pid_m * BLOCK_M - {c}, 0) // BLOCK_N * BLOCK_N", n, None

    def _split_at_band(self, body: list, loop: list, end: str, c: int, held: dict) -> list:
        """The key loop in two: the tiles wholly below the diagonal (every key at most the tile's
        first query + c), whose scores need no causal mask, so the predicates it is made of are
        constants there (Triton folds the selects away), then the tiles the diagonal crosses, as they were.
        FlashAttention and Triton's own fused-attention tutorial split the loop the same way: the
        mask's index arithmetic and selects are per score, on all but one or two tiles a row.
        `end`: the causal loop's end; `held`: the mask's predicates, each true or false on every
        such tile."""
        first = f"tl.minimum({end}, tl.maximum(pid_m * BLOCK_M + {c + 1}, 0) // BLOCK_N * BLOCK_N)"
        quiet = []
        for ln in loop:
            name = ln.split(" =", 1)[0].strip()
            if " = " in ln and name in held:
                ln = f"{name} = tl.full((1, 1), {int(held[name])}, tl.int1)  # decided on this tile: no causal mask"
            quiet.append(ln)
        out = body[:-1]
        out.append("# key tiles below the diagonal: no score of theirs is masked")
        out.append("off_band = " + first)
        out.append("for start_n in range(0, off_band, BLOCK_N):")
        out += ["    " + ln for ln in quiet]
        out.append("# key tiles the diagonal crosses")
        out.append("for start_n in range(off_band, " + end + ", BLOCK_N):")
        out += ["    " + ln for ln in loop]
        return out

    def assemble(self, s_text, p_text, v_text, prec2, stores) -> KernelSource:
        p1, p2, s, e1, e2 = self.plan.p1, self.plan.p2, self.s, self.e1, self.e2
        name = p1.name
        fn = kernel_ident(name)
        in_ranks = [len(_shape(a)) for a in p1.args]
        out_ranks = [len(_shape(r)) for r in p2.results]
        shapes = [_shape(a) for a in p1.args] + [_shape(r) for r in p2.results]
        symbols = dims.kernel_symbols(p1.func, shapes)
        params = tensor_params(in_ranks, out_ranks) + symbols
        constexprs = {"BLOCK_M": s["block_m"], "BLOCK_N": s["block_n"], "BLOCK_D": s["block_d"],
                      "BLOCK_V": s["block_v"]}
        if "block_l" in s:
            constexprs["BLOCK_L"] = s["block_l"]
        params.extend(f"{k}: tl.constexpr" for k in constexprs)
        M, N, D, DV = p1.M, p1.N, p1.K, p2.N
        need = e1.need | e2.need | (self.e0.need if self.e0 is not None else set())
        if self.plan.chain:
            head = [
                f"# {name}: two chained products (kind 'chain'), the hidden activation kept in registers",
                f"# hidden: {p1.gen.name} at {_loc(p1.gen)}; output: {p2.gen.name} at {_loc(p2.gen)}",
                f"#   batch = {p1.B}; rows = {M}; hidden = {N}; widths {D} (in), {DV} (out)",
            ]
            if self.plan.up is not None:
                head.append(f"# up product: {self.plan.up.gen.name} at {_loc(self.plan.up.gen)}, per hidden tile too")
            if self.plan.lead is not None:
                lg = self.plan.lead.plan.gen
                head.append(f"# lead product: {lg.name} at {_loc(lg)}, its epilogue the input rows (never stored)")
        else:
            head = [
                f"# {name}: flash attention (kind 'attention'), online softmax over key tiles",
                f"# scores: {p1.gen.name} at {_loc(p1.gen)}; output: {p2.gen.name} at {_loc(p2.gen)}",
                f"#   batch = {p1.B}; queries = {M}; keys = {N}; head dims {D} (q·k), {DV} (v)",
            ]
        body = head + [
            "pid_m = tl.program_id(0)",
            "offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        ]
        if p1.order["b"]:
            body.append("pid_b = tl.program_id(1)")
        body += e1.index_defs("b", "pid_b")
        body += [ln for ln in e2.index_defs("b", "pid_b") if ln.split(" =")[0] not in e1.need]
        body += [ln for ln in e1.index_defs("m", "offs_m[:, None]")]
        body += [ln for ln in e2.index_defs("m", "offs_m[:, None]") if ln.split(" =")[0] not in e1.need]
        if "mask_m" in need:
            body.append(f"mask_m = offs_m[:, None] < {dims.code(M)}")
        body.append("offs_d = tl.arange(0, BLOCK_D)")
        body += _k_defs(e1, "offs_d", "d", D)
        body.append("offs_v = tl.arange(0, BLOCK_V)")
        body += [e2.rename_text(ln) for ln in e2.index_defs("n", "offs_v[None, :]")]
        if "mask_n" in e2.need:
            body.append(f"mask_v = offs_v[None, :] < {DV}")
        if self.e0 is not None:
            body += self.lead_lines({ln.split(" =")[0] for ln in body if " = " in ln})
        body += e1.text(self.q)
        if not self.plan.chain:
            body += [
                f"# running max, sum and output of the online softmax ({self.stat_ty})",
                f'm_i = tl.full((BLOCK_M,), float("-inf"), {_TL[self.stat_ty]})',
                f"l_i = tl.full((BLOCK_M,), 0.0, {_TL[self.stat_ty]})",
            ]
        body += [
            f"out = tl.full((BLOCK_M, BLOCK_V), 0.0, {_TL[e2.acc_ty]})",
            f"for start_n in range(0, {dims.code(N)}, BLOCK_N):",
        ]
        loop = ["offs_n = start_n + tl.arange(0, BLOCK_N)"]
        loop += [e1.rename_text(ln) for ln in e1.index_defs("n", "offs_n[None, :]")]
        loop += [e2.rename_text(ln) for ln in e2.index_defs("k", "offs_n[:, None]", ctx="b")]
        mask_keys = not isinstance(N, int) or N % s["block_n"] != 0  # a symbolic length: masked
        if mask_keys:
            loop.append(f"mask_j = offs_n[None, :] < {dims.code(N)}")
            loop.append(f"mask_jb = offs_n[:, None] < {dims.code(N)}")
        loop += e1.text(self.k)
        loop += e1.text(self.sc)
        loop.append(f"s = {e1.rename_text(s_text)}")
        score_lines = e1.text(self.sc) + [loop[-1]]
        bounds = self._causal_range(body, loop, score_lines)
        if bounds is not None:
            body[-1] = f"for start_n in range({bounds[0]}, {bounds[1]}, BLOCK_N):"
            why = ("keys past the diagonal of this query tile score -inf" if not self.plan.chain else
                   "hidden columns on the far side of the diagonal are 0")
            body.insert(len(body) - 1, f"# {why} (proved from the score lines): not visited")
        off_band = None
        # 16-bit dots only: float32 ones (3xTF32 or FMA) hold most registers already, and a second
        # loop made sm_90's head-dim-128 kernel spill (Triton 3.6's ptxas: 255 registers and 44
        # bytes spilled, none before), for a mask that is a smaller share of their work
        if bounds is not None and bounds[2] is not None and e1.dot_dt in ("bf16", "f16"):
            c, query, key = bounds[2]
            held = band_predicates(score_lines, query, key, "qk", c)
            if held:
                off_band = (bounds[1], c, held)
        if self.plan.chain:
            # the hidden activation of this tile goes straight into the second product; columns
            # past the hidden size are 0 (their W2 rows are masked too, but act(0 + b) need not be)
            if mask_keys:
                loop.append("s = tl.where(mask_j, s, 0.0)")
            loop.append("p = s")
        else:
            if mask_keys:
                loop.append('s = tl.where(mask_j, s, float("-inf"))')
            loop += [
                "m_new = tl.maximum(m_i, tl.reduce(s, 1, _max_f))",
                '# subtract 0, not -inf, where a row has seen only -inf so far: exp(-inf - -inf) is NaN',
                'm_use = tl.where(m_new == float("-inf"), 0.0, m_new)',
                "alpha = tl.exp(m_i - m_use)",
                "p = tl.exp(s - m_use[:, None])",
                f"l_i = l_i * alpha + tl.reduce(p, 1, {_body.SUM_COMBINE})",
                "out = out * alpha[:, None]",
            ]
        loop += e2.text(self.v)
        loop.append(f"out = tl.dot({p_text}, {e2.rename_text(v_text)}, out{prec2})")
        if not self.plan.chain:
            loop.append("m_i = m_new")
        if off_band is not None:
            body = self._split_at_band(body, loop, *off_band)
        else:
            body += ["    " + ln for ln in loop]
        if self.plan.chain:
            body.append("acc = out")
        elif self.plan.safe:
            body.append("# SDPA's safe softmax: a row of only -inf scores gives 0")
            body.append("acc = tl.where(l_i[:, None] == 0.0, 0.0, out / l_i[:, None])")
        else:
            body.append("acc = out / l_i[:, None]")
        body += e2.text(self.out)
        body += e2.text(stores)
        body += self.lse_stores(p2.results)
        src = ["import triton.language as tl", "", "", "@jit", "def _max_f(a, b):",
               "    return tl.maximum(a, b)",
               "", "", "@jit", f"def {fn}(", "    " + ", ".join(params) + ",", "):"]
        src += ["    " + ln for ln in body]
        source = "\n".join(src) + "\n"
        helpers = _body.helpers_used(source)
        if helpers:
            head = "import triton.language as tl\n\n\n"
            source = head + "\n\n".join(_body.HELPERS[h] for h in helpers) + "\n\n" + source[len(head):]
        from .contraction_ir import _PTR

        ptypes = [_PTR[_elem(a)] for a in p1.args] + [_PTR[_elem(r)] for r in p2.results]
        return KernelSource(
            name=name, fn_name=fn, source=source, input_ranks=in_ranks, output_ranks=out_ranks,
            grid=tuple(s["grid"]), constexprs=constexprs, num_warps=s["num_warps"], num_stages=s["num_stages"],
            pointer_types=ptypes, symbols=symbols, symbol_dims=symbol_dims(p1.func, symbols, shapes),
            # k with its keys innermost for exact float32 q·kᵀ (FMA units); tensor cores read it as it is
            relayout=fma_relayout(e1) if "ieee" in _precision(self.plan, "f32", self.target) else [],
        )


__all__ = ["choose_schedule", "generate_attention"]


def _k_defs(part: _Part, offs: str, tag: str, extent) -> list[str]:
    """A part's K indices along `offs`, for its A tile (a row) and B tile (a column), and the
    masks past `extent` it needs, named `mask_<tag>a` / `mask_<tag>b`."""
    lines = [part.rename_text(ln) for ln in part.index_defs("k", f"{offs}[None, :]", ctx="a")]
    lines += [part.rename_text(ln) for ln in part.index_defs("k", f"{offs}[:, None]", ctx="b")]
    if "mask_ka" in part.need:
        lines.append(f"mask_{tag}a = {offs}[None, :] < {extent}")
    if "mask_kb" in part.need:
        lines.append(f"mask_{tag}b = {offs}[:, None] < {extent}")
    return lines


def _precision(plan: AttnPlan, dt: str, target: str) -> str:
    """Triton's input_precision for q·kᵀ and P·v over `dt` operands: an attention's as PyTorch's
    fused kernels compute it (patterns.attention_precision); a chain's are matmuls in eager."""
    if plan.chain:
        return dot_precision(plan.p1.func, dt)
    return attention_precision(plan.p1.func, dt, target)


def _outputs(p2) -> list:
    """The kernel's results computed from P·v: not the log-sum-exp (float32 whatever the model's
    dtype), which must not make a 16-bit attention's dots float32 ones."""
    return [r for r in p2.results if not any(r == a for a in p2.apart)]


def _qk_types(p1, p2) -> list[str]:
    """The element types q and k go to q·kᵀ's dot in, as the kernel is built: 16-bit factors that
    were widened or scaled by constants narrowed back. The schedule picks tiles by them (a bf16
    dot on tensor cores, an exact float32 one on FMA units)."""
    types = [_narrow_of(p1, i) for i in (0, 1)]
    narrow = [t for t in types if t in ("f16", "bf16")]
    if len(narrow) == 1 and "f32" in types and p1.dot_scaled[types.index("f32")] is None \
            and all(_elem(r) == narrow[0] for r in _outputs(p2)):
        # a float32 factor (Llama's q, rotated and scaled by a kernel of its own) beside a 16-bit
        # one, into a 16-bit output: rounded to 16 bits for the tensor cores, as eager's fused
        # kernels take q; the rounding (2**-9 relative) is the output's own
        types = [narrow[0]] * 2
    return types


def _narrow_of(p, i: int) -> str:
    """The 16-bit type side i's factor has once its constant scale is moved onto the scores."""
    sc = p.dot_scaled[i]
    return p.dot_types[i] if sc is None else sc[3]


def _score_scale(p) -> float | None:
    """The float32 factor q·kᵀ is multiplied by when q's and k's constant scales move onto the
    scores (SDPA's sqrt(scale) on each), or None when neither factor is scaled. The caller checks
    that both factors, unscaled, are 16-bit of one type, or both float32."""
    import numpy as np

    if all(sc is None for sc in p.dot_scaled):
        return None
    f = np.float32(1.0)
    for sc in p.dot_scaled:
        if sc is not None:
            f = f * np.float32(sc[1]) if sc[2] == "arith.mulf" else f / np.float32(sc[1])
    return float(f)

