"""Contraction kernels, emission: the reductions a contraction kernel evaluates in its tiles
besides its product. A pooling of the epilogue, from one accumulator per window element
(passes/fuse_windows.py), and a norm's per-row sums over a tile that holds the whole row
(passes/fuse_row_stats.py). Mixed into contraction_emit.py's `_Emitter`."""
from __future__ import annotations

import math

from . import body as _body
from . import patterns as _pat
from .contraction_ir import Lin, _Val, _as_op, _dim_pos, _is_shaped, _iterators, _lin, _loc, _maps
from .contraction_plan import _get, _loop_sizes
from .source import CodegenError


def output_env(op, out_map, idx: tuple, consts: bool) -> list:
    """Per loop of generic `op`, the index (a Lin) its output map places at `idx`; None for loops
    the map does not name. `consts`: the map may hold constants (a reduced dim's 0), read at a
    constant position; otherwise only dims."""
    env = [None] * len(_loop_sizes(op))
    for j, e in enumerate(out_map.results):
        d = _dim_pos(e)
        if d is not None:
            env[d] = idx[j]
        elif not consts:
            raise CodegenError(op, "pointwise generic with a non-projected output map")
        elif not idx[j].is_const():
            raise CodegenError(op, "row statistics read along the row")
    return env


class _Reductions:
    def pooled(self, op, idx: tuple, ctx: str) -> _Val:
        """The pooling at pooled position `idx`: its combiner folded over the epilogue's value at
        every window element (each from its own accumulator), starting from its init."""
        p = self.p
        if ctx != "e" or self.win is not None:
            raise CodegenError(op, "a pooling read other than by the epilogue")
        n_in = len(op.opview.inputs)
        body = op.regions[0].blocks[0]
        comb = _as_op(list(body.operations)[0])
        out_arg, in_arg = body.arguments[n_in], body.arguments[0]
        acc = self.value(op.opview.outputs[0], idx, ctx)
        identity = _pat.COMBINERS[comb.name]
        if acc.const is not None and (acc.const == identity or (math.isnan(identity) and math.isnan(acc.const))):
            acc = None  # the combiner's identity (max pooling's -inf): start from the first element
        src_lay = _get(p.layouts, op.operands[0])
        self.frames.append({"header": f"# pooling: {op.name} at {_loc(op)}", "loc": _loc(op), "done": set()})
        try:
            for w in range(p.windows):
                self.win = w
                try:
                    v = self.value(op.operands[0], src_lay, ctx)
                finally:
                    self.win = None
                if acc is None:
                    acc = v
                    continue
                ins = [acc if x == out_arg else v if x == in_arg else None for x in comb.operands]
                if any(x is None for x in ins):
                    raise CodegenError(op, "pooling body reads something other than its input and output")
                acc = self.scalar_op(comb, ins, None, ctx)
        finally:
            self.frames.pop()
        return acc

    def row_sum(self, op, idx: tuple, ctx: str) -> _Val:
        """A per-row sum (passes/fuse_row_stats.py) at row `idx`: its summand evaluated over the A
        tile (ctx "a": the row along K) or the output tile (ctx "e": along N), which holds the
        whole row (the schedule keeps it one tile), summed along that axis."""
        p = self.p
        axis = {"a": "k", "e": "n"}.get(ctx)
        if axis is None or len(p.order[axis]) != 1:
            raise CodegenError(op, "row statistics outside an A or output tile")
        extent, tile = (p.K, self.s["block_k"]) if axis == "k" else (p.N, self.s["block_n"])
        if not tile >= extent:
            raise CodegenError(op, "row statistics over a tile that does not hold the whole row")
        combs = _pat.reduction_combiners(op)
        if not combs or len(combs) != 1 or combs[0][0] != "arith.addf":
            raise CodegenError(op, "row statistics that are not one sum")
        if any(p.cls[d] == axis for lin in idx for d in lin.dims()):
            # read at a position along the tile's row axis (a square matmul reading its A
            # factor transposed): the row summed is not the tile's
            raise CodegenError(op, "row statistics read along the row they sum")
        view = op.opview
        n_in = len(view.inputs)
        maps = _maps(op)
        sizes = _loop_sizes(op)
        env = output_env(op, maps[n_in], idx, consts=True)
        red = [d for d, it in enumerate(_iterators(op)) if it == "reduction"]
        if len(red) != 1 or sizes[red[0]] != extent:
            raise CodegenError(op, "row statistics over a row other than the tile's")
        env[red[0]] = Lin.dim(p.order[axis][0])
        if any(x is None for x in env):
            raise CodegenError(op, "row statistics whose output map does not cover its loops")
        body = op.regions[0].blocks[0]
        body_ops = [_as_op(o) for o in body.operations]
        operands = list(view.inputs) + list(view.outputs)

        def arg(n: int) -> _Val:
            v = operands[n]
            if not _is_shaped(v):
                return self.scalar(v, op)
            if n >= n_in:
                raise CodegenError(op, "row statistics whose summand reads the sum")
            return self.value(v, tuple(_lin(e, env, op) for e in maps[n].results), ctx)

        self.frames.append({"header": f"# row statistics: {op.name} at {_loc(op)}", "loc": _loc(op), "done": set()})
        try:
            x = self.body_value(op, body, body_ops, combs[0][1], env, ctx, [], arg)
            ty = x.ty
            # the A tile's sums stay in the K loop (its one iteration): their class has "k"
            cls = frozenset(x.cls | {"k"}) if axis == "k" else frozenset(x.cls - {"n"})
            text = x.text if x.const is None else _body.constant_expr(x.const, ty)
            if axis not in x.cls or "m" not in x.cls:
                text = self.line(ctx, cls, f"tl.broadcast_to({text}, (BLOCK_M, BLOCK_{axis.upper()}))", "r")
            masked = self.mask_k if axis == "k" else self.mask_n
            if masked:
                mask = f"mask_k{ctx}" if axis == "k" else "mask_n"
                self.need.add(mask)
                text = self.line(ctx, cls, f"tl.where({mask}, {text}, 0.0)", "r")
            total = _Val(self.line(ctx, cls, f"_row_sum({text})", "r", _loc(op)), ty, cls)
            init = self.value(view.outputs[0], idx, ctx)
            if init.const is not None and float(init.const) == 0.0:
                return total
            return _Val(self.line(ctx, cls | init.cls, f"{init.text} + {total.text}", "r"), ty, cls | init.cls)
        finally:
            self.frames.pop()
