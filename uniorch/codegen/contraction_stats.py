"""Contraction kernels: per-chunk partial sums of an epilogue value (passes/tile_stats.py).

A generic marked `uniorch.tile_stat = L` sums an epilogue value x over chunks of L consecutive
rows of one tile axis (M, or N: a convolution's batch x height x width), keeping the other dims:
`S[p, ...] = sum x` or, reading S, `Q[p, ...] = sum (x - S / L)²`; or takes their max or min.
Tiles along that axis hold whole chunks (the schedule keeps the block a multiple of L), so each
program reduces its tile's chunks in registers and stores them; no partial is shared between
programs. A chunk of no power
of two rows (7 x 7 pixels) is one tile's: the tiles step by the chunk, the rest of the block masked. Mixed into
contraction_emit.py's `_Emitter`.
"""
from __future__ import annotations

from torch_mlir import ir

from . import body as _body
from . import patterns as pat
from .contraction_ir import _as_op, _maps, _shape
from .contraction_plan import _Plan, _get, _known
from .source import CodegenError

# a partial's combiner -> Triton's: Triton's own sum (the interpreter sums it with numpy); NaN-
# propagating max and min (body.py's helpers), as torch's amax and max pools are
COMBINE = {"arith.addf": _body.SUM_COMBINE, "arith.maximumf": "_maximumf_combine",
           "arith.minimumf": "_minimumf_combine"}


def _stat_layout(plan: _Plan, op):
    """(axis class, L, x, y dims along the axis in tile order, y's other non-unit dims) of tile-stat
    generic `op`, checked against the partial map passes/tile_stats.py builds."""
    from uniorch.passes.tile_stats import chunk_map

    L = ir.IntegerAttr(op.attributes["uniorch.tile_stat"]).value
    x = op.operands[0]
    if not _known(plan.layouts, x):
        raise CodegenError(op, "tile statistics of a value not on the contraction's output")
    lay = _get(plan.layouts, x)
    shape = _shape(x)
    dim_of = {}
    for j, lin in enumerate(lay):
        if lin.is_const():
            if shape[j] != 1:
                raise CodegenError(op, "tile statistics of a broadcast value")
            continue
        if len(lin.terms) != 1 or lin.terms[0][1] != 1 or lin.const:
            raise CodegenError(op, "tile statistics of a value read off the output's dims")
        dim_of[lin.terms[0][0]] = j
    out_map = str(_maps(op)[-1])
    for cls in ("m", "n"):
        if not plan.order[cls] or any(d not in dim_of for d in plan.order[cls] if plan.sizes[d] != 1):
            continue
        rows = [dim_of[d] for d in plan.order[cls] if d in dim_of]
        if len(rows) != len(plan.order[cls]):
            continue
        others = [j for j in range(len(shape)) if j not in rows and shape[j] != 1]
        with op.context:
            expected = str(chunk_map(shape, rows, others, L))
        if expected == out_map:
            return cls, L, x, rows, others
    raise CodegenError(op, "tile statistics whose chunks are not the tile's rows")


def check_tile_stats(plan: _Plan) -> None:
    """Sets plan.tile_rows; one axis and one chunk length for all of the kernel's tile statistics."""
    plan.tile_stat_layouts = [_stat_layout(plan, op) for op in plan.tile_stats]
    seen = {lay[:2] for lay in plan.tile_stat_layouts}
    if len(seen) != 1:
        raise CodegenError(plan.tile_stats[0], "tile statistics along two axes or chunk lengths")
    plan.tile_rows = seen.pop()
    cls, L = plan.tile_rows
    if not isinstance(plan.extent(cls), int) or plan.extent(cls) % L:
        raise CodegenError(plan.tile_stats[0], "tile statistics over a row count that chunks do not divide")


class _TileStats:
    def summed(self, op, x, centred: bool):
        """The value tile-stat generic `op` sums at each element of the output tile: its body
        evaluated on x's tile up to the sum (an upcast, an activation); for a centred sum, the
        value it centres (`(v - S / L)²`'s v: the partial S comes per chunk, not from the body)."""
        body = op.regions[0].blocks[0]
        body_ops = [_as_op(o) for o in body.operations]
        comb = _as_op(body_ops[-1].operands[0].owner)
        out_arg = body.arguments[len(op.operands) - 1]
        v = next((w for w in comb.operands if w != out_arg), None)
        if comb.name not in COMBINE or v is None or (centred and comb.name != "arith.addf"):
            raise CodegenError(op, "a tile statistic that is not a sum, max or min")
        if centred:
            sq = v.owner
            d = sq.operands[0] if not isinstance(sq, ir.Block) and _as_op(sq).name == "arith.mulf" else None
            if d is None or sq.operands[1] != d or isinstance(d.owner, ir.Block) or _as_op(d.owner).name != "arith.subf":
                raise CodegenError(op, "a centred tile statistic that is not a sum of (v - S / L)²")
            m = d.owner.operands[1]
            if isinstance(m.owner, ir.Block) or _as_op(m.owner).name != "arith.mulf" \
                    or m.owner.operands[0] != body.arguments[1]:
                raise CodegenError(op, "a centred tile statistic that is not a sum of (v - S / L)²")
            v = d.owner.operands[0]
        lay = _get(self.p.layouts, x)
        env = list(lay)

        def arg(n: int):
            if n != 0:
                raise CodegenError(op, "a tile statistic reading other than the output tile")
            return self.value(x, lay, "e")

        return self.body_value(op, body, body_ops, v, env, "e", [], arg)

    def tile_stat_stores(self) -> list[str]:
        """The partial sums of each tile-stat generic, per chunk of the tile, and their stores."""
        p = self.p
        if not p.tile_stats:
            return []
        cls, L = p.tile_rows
        block = "BLOCK_M" if cls == "m" else "BLOCK_N"
        axis = 0 if cls == "m" else 1
        rows = f"tl.arange(0, {block})[:, None]" if cls == "m" else f"tl.arange(0, {block})[None, :]"
        n_chunks = p.extent(cls) // L
        pid = "pid_m" if cls == "m" else "pid_n"
        other = "n" if cls == "m" else "m"
        out: list[str] = []
        sums: dict = {}  # S result -> its per-chunk name
        body: list[str] = []
        for op, (_, _, x, _, others) in zip(p.tile_stats, p.tile_stat_layouts):
            reads_sum = len(op.operands) == 3  # (x, S, init): the centred sum of squares
            xv = self.summed(op, x, reads_sum)
            comb = _as_op(pat.yield_op(op).operands[0].owner).name
            text = xv.text if xv.ty == "f32" else f"{xv.text}.to(tl.float32)"
            if set(xv.cls) != {"m", "n"}:
                text = f"tl.broadcast_to({text}, (BLOCK_M, BLOCK_N))"
            r = next(i for i, res in enumerate(p.results) if res == op.results[0]) \
                if any(res == op.results[0] for res in p.results) else None
            name = f"ts{len(sums)}"
            if reads_sum:
                s_name = next((n for v, n in sums.items() if v == op.operands[1]), None)
                if s_name is None:
                    raise CodegenError(op, "a centred tile sum before the sum it centres on")
                mean = f"{s_name}[None, :]" if axis == 0 else f"{s_name}[:, None]"
                body.append(f"{name}_d = tl.where(sel, {text} - {mean} * {1.0 / L!r}, 0.0)")
                body.append(f"{name} = tl.reduce({name}_d * {name}_d, {axis}, {_body.SUM_COMBINE})")
            else:  # a sum, or a max (min) from -inf (inf), NaN-propagating as torch's
                ident = {"arith.addf": "0.0", "arith.maximumf": 'float("-inf")', "arith.minimumf": 'float("inf")'}[comb]
                body.append(f"{name}_x = tl.where(sel, {text}, {ident})")
                body.append(f"{name} = tl.reduce({name}_x, {axis}, {COMBINE[comb]})")
            sums[op.results[0]] = name
            if r is None:
                continue
            res_lay = []
            for k, j in enumerate(others):
                lin = _get(p.layouts, x)[j]
                res_lay.append(f"{self.lin_text(lin, 'e')} * out{r}_s{k + 1}")
            addr = f"out{r}_ptr + chunk * out{r}_s0" + "".join(f" + {t}" for t in res_lay)
            val = f"{name}[None, :]" if axis == 0 else f"{name}[:, None]"
            # the address as a block like the value (a depthwise convolution's channel is a scalar)
            addr = f"tl.broadcast_to({addr}, {'(1, BLOCK_N)' if axis == 0 else '(BLOCK_M, 1)'})"
            mask = self.mask({other}, "e")
            m = f"(chunk < {n_chunks})" + (f" & {mask}" if mask else "")
            body.append(f"tl.store({addr}, {val}, mask={m})")
        out.append(f"# tile statistics: partials over chunks of {L} rows of {cls.upper()} (passes/tile_stats.py)")
        if L & (L - 1):  # one chunk per tile, the tiles L rows apart (contraction_schedule.row_step)
            out.append("for tsj in tl.static_range(1):")
            inner = [f"sel = {rows} < {L}", f"chunk = {pid}"] + body
        else:
            out.append(f"for tsj in tl.static_range({block} // {L}):")
            inner = [f"sel = ({rows} // {L}) == tsj",
                     f"chunk = {pid} * ({block} // {L}) + tsj"] + body
        out += ["    " + ln for ln in inner]
        return out


__all__ = ["check_tile_stats", "_TileStats"]
