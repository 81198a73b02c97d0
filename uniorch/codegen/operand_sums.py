"""Sums of a matmul factor over the matmul's reduction, computed in the matmul's K loop.

A linear layer's backward reads its output gradient dY three times: dX = dY W, dW = dYᵀ X, and the
bias gradient db = sum(dY, rows). The weight gradient's K loop walks dY's rows already; each of its
A tiles (features x rows of dY) summed along K is the bias gradient's partial for those rows, so
the sum rides on that loop (cuBLASLt's BGRADA/BGRADB epilogues do the same) instead of a reduction
kernel that reads dY again. passes/fuse_operand_sums.py puts the sum's generic in the matmul's
kernel, marked `uniorch.operand_sum`; contraction_emit.py accumulates it per tile row in float32
(`tl.sum` of the factor tile, as loaded: exact whatever precision the dot runs in) and the
programs of the first column tile store it.

`sum_mapping` is the condition both share: the sum adds one tensor X (or X widened) into an output
over some of its dims; the matmul's factor is X itself, or X moved by a data-movement generic
(a transpose) in the same kernel; the dot multiplies that factor as it is (widened at most, not
scaled); under the factor's index map, the sum's kept dims are the matmul's rows on the factor's
side (M for the A factor, N for the B factor) and its summed dims are exactly the matmul's K dims;
the matmul has no batch dims.
"""
from __future__ import annotations

from torch_mlir import ir

from . import body as _body
from . import patterns as pat
from .contraction_ir import _PTR, _TL, Lin, _elem, _loc, _maps
from .source import CodegenError

OPERAND_SUM = "uniorch.operand_sum"


def summed_tensor(r):
    """X if generic `r` is a plain sum of one tensor into its one output (body `out + x`, x its
    input or its input widened), its maps plain dims; else None."""
    if not pat.is_reduction(r) or pat.num_inputs(r) != 1 or len(pat.outputs(r)) != 1 or len(r.results) != 1:
        return None
    x = pat.inputs(r)[0]
    if not isinstance(x.type, ir.RankedTensorType):
        return None
    for m in pat.indexing_maps(r):
        if not all(isinstance(e, ir.AffineDimExpr) or (isinstance(e, ir.AffineConstantExpr) and e.value == 0)
                   for e in m.results):
            return None
    blk = pat.body(r)
    ops = pat.body_ops(r)
    y = pat.yield_op(r)
    add = y.operands[0].owner
    if isinstance(add, ir.Block) or pat.op_of(add).name != "arith.addf":
        return None
    a, b = add.operands
    v = a if b == blk.arguments[1] else b if a == blk.arguments[1] else None
    if v is None:
        return None
    used = [pat.op_of(add)]
    if not isinstance(v.owner, ir.Block) and pat.op_of(v.owner).name == "arith.extf":
        used.append(pat.op_of(v.owner))
        v = v.owner.operands[0]
    if v != blk.arguments[0] or len(ops) != len(used):
        return None
    return x


def cast_tail(r) -> list:
    """[(value, element types from the sum's to the value's)]: the sum `r`'s result, then each
    one-input cast generic (`extf`, `truncf`; the same map in and out) reading one of these (an
    autocast bias's sum rounded to bf16, then widened to the fp32 parameter's gradient)."""
    first = r.results[0]
    out = [(first, [_elem(first)])]
    i = 0
    while i < len(out):
        v, types = out[i]
        i += 1
        for u in v.uses:
            o = pat.op_of(u.owner)
            if _is_cast(o) and o.operands[0] == v:
                out.append((o.results[0], types + [_elem(o.results[0])]))
    return out


def _is_cast(o) -> bool:
    if not (pat.is_cast_only(o, "arith.extf") or pat.is_cast_only(o, "arith.truncf")):
        return False
    m_in, m_out = pat.indexing_maps(o)
    return str(m_in) == str(m_out)


def _factor_dims(c, i: int, inside):
    """(X, the matmul's loop dim per dim of X) for the matmul's factor `i`: X the factor itself, or
    the input of a data-movement generic producing it in the same kernel (`inside(generic)`)."""
    maps = pat.indexing_maps(c)
    f = pat.op_of(c).operands[i]
    per_dim = [e.position for e in maps[i].results]
    owner = f.owner
    if isinstance(owner, ir.Block) or pat.op_of(owner).name != "linalg.generic":
        return f, per_dim
    t = pat.op_of(owner)
    if not pat.is_data_movement(t) or not inside(t):
        return f, per_dim
    m_in, m_out = pat.indexing_maps(t)
    if not all(isinstance(e, ir.AffineDimExpr) for e in list(m_in.results) + list(m_out.results)):
        return None
    out_pos = [e.position for e in m_out.results]
    if sorted(out_pos) != list(range(len(pat.loop_sizes(t)))):
        return None  # the mover's output must name each of its loops once
    at = {d: per_dim[j] for j, d in enumerate(out_pos)}
    return pat.inputs(t)[0], [at[e.position] for e in m_in.results]


def _plain_factor(c, i: int) -> bool:
    """The dot multiplies factor `i` as it is (or widened), not scaled."""
    blk = pat.body(c)
    add = pat.yield_op(c).operands[0].owner
    prod = next(v for v in add.operands if v != blk.arguments[2])
    for v in prod.owner.operands:
        if not isinstance(v.owner, ir.Block) and pat.op_of(v.owner).name == "arith.extf":
            v = v.owner.operands[0]
        if v == blk.arguments[i]:
            return True
    return False


def sum_mapping(c, r, inside=lambda t: True):
    """(side "a" or "b", {dim of `r`: dim of `c`}) where sum `r` can ride on matmul `c`'s K loop (see
    the module doc), else None. `inside(generic)`: whether a generic producing a factor will be in
    the matmul's kernel (in a kernel's function, every op is)."""
    x = summed_tensor(r)
    dims = pat.contraction_dims(c) if x is not None else None
    if dims is None or dims.batch:
        return None
    r_in = pat.indexing_maps(r)[0]
    its = pat.iterator_types(r)
    for i, side in ((0, "a"), (1, "b")):
        src = _factor_dims(c, i, inside)
        if src is None or src[0] != x or not _plain_factor(c, i):
            continue
        rows = set(dims.m if i == 0 else dims.n)
        mapping: dict = {}
        ok = True
        for e, cd in zip(r_in.results, src[1]):
            if not isinstance(e, ir.AffineDimExpr):
                ok = False
                break
            rd = e.position
            if mapping.get(rd, cd) != cd:
                ok = False
                break
            mapping[rd] = cd
        if not ok or len(mapping) != len(its) or len(set(mapping.values())) != len(mapping):
            continue
        kept = {mapping[d] for d, it in enumerate(its) if it == "parallel"}
        summed = {mapping[d] for d, it in enumerate(its) if it == "reduction"}
        if kept == rows and summed == set(dims.k):
            return side, mapping
    return None




class _OperandSums:
    """Mixed into contraction_emit.py's `_Emitter`: the sums of `_Plan.operand_sums`."""

    def operand_sum_loop(self, factors: dict) -> None:
        """Per sum, a float32 (float64 for f64 factors) accumulator along its tile's rows, fed each factor tile in the K loop.
        `factors`: tile side -> the factor's value as the dot's operand is made from it (masked
        along K, not yet cast to the dot's type)."""
        for j, (op, side, _, _) in enumerate(self.p.operand_sums):
            val = factors[side]
            acc = "f64" if val.ty == "f64" else "f32"  # a float64 model's sum in float64, as eager's
            text = val.text if val.ty == acc else f"{val.text}.to({_TL[acc]})"
            block, axis = ("BLOCK_M", 1) if side == "a" else ("BLOCK_N", 0)
            self.pre.append(f"# sum of the {side.upper()} factor over K (passes/fuse_operand_sums.py)")
            self.pre.append(f"osum{j} = tl.full(({block},), 0.0, {_TL[acc]})")
            self.loop.append(f"osum{j} += tl.reduce({text}, {axis}, {_body.SUM_COMBINE})")

    def operand_sum_results(self) -> set:
        """The values the sums store: each sum's result and the casts of it (`cast_tail`)."""
        return {v for _, _, _, tail in self.p.operand_sums for v, _ in tail}

    def operand_sum_stores(self) -> list[str]:
        """Each sum (and each cast of it the kernel returns), stored by the programs of the first
        tile across its rows (all compute it)."""
        p = self.p
        out: list[str] = []
        for j, (op, side, mapping, tail) in enumerate(p.operand_sums):
            for res, types in tail:
                r = next((i for i, v in enumerate(p.results) if v == res), None)
                if r is None:
                    continue
                ty = types[-1]
                if ty not in _PTR or any(t not in _TL for t in types):
                    raise CodegenError(op, f"a sum of element type {ty}")
                terms = []
                for k, e in enumerate(_maps(op)[-1].results):
                    if isinstance(e, ir.AffineDimExpr) and p.cls[mapping[e.position]] != "u":  # "u": size 1, at 0
                        terms.append(f"{self.lin_text(Lin.dim(mapping[e.position]), 'e')} * out{r}_s{k}")
                val = f"osum{j}[:, None]" if side == "a" else f"osum{j}[None, :]"
                # rounded to the sum's type as eager's sum is, then through each cast
                for t in ([] if types == ["f32"] else types):
                    val = f"{val}.to({_TL[t]})"
                shape = "(BLOCK_M, 1)" if side == "a" else "(1, BLOCK_N)"
                addr = f"tl.broadcast_to(out{r}_ptr" + "".join(f" + {t}" for t in terms) + f", {shape})"
                # a tensor (pid_n may be the constant 0 of a one-tile grid)
                first = f"(tl.full({shape}, {'pid_n' if side == 'a' else 'pid_m'}, tl.int32) == 0)"
                m = self.mask({"m"} if side == "a" else {"n"}, "e")
                out.append(f"# result {r} ({ty}): the sum at {_loc(op)}")
                out.append(f"tl.store({addr}, {val}, mask={first}" + (f" & {m})" if m else ")"))
        return out


__all__ = ["OPERAND_SUM", "cast_tail", "summed_tensor", "sum_mapping", "_OperandSums"]
