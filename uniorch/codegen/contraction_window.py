"""A depthwise convolution evaluated inside a contraction's factor tile (passes/fuse_depthwise.py
marks it `uniorch.window_producer`): MobileNetV2's 3x3 depthwise convolution computed where its
1x1 projection loads its B tile, so the expanded activation is never written.

The depthwise generic reads its input at `pixel + tap offset` and its weights at `(channel, tap)`.
Evaluated at the tile's positions (the projection's K index for the channel, its N indices for
the pixel), its window dims are not loops of the projection: they become tap dims of a loop of
their own inside the K loop,

    wacc = 0
    for tap in range(K):                      # K = the window's size, 9 for 3x3
        wacc += w[c, tap] * in[n, c, y + tap // 3 - 1, x + tap % 3 - 1]
    b = wacc + init                           # the bias the accumulator starts from

with the input's own producers (the expansion's BatchNorm and ReLU6 behind a zero pad) evaluated
at each tap. Tap dims are Lin dims numbered from `TAP_DIM` (past any loop dim): they print as the
loop's names and count as K for masks and placement, so everything that moves with the tap lands
in the loop's body. Values computed in that body are forgotten after it (they are the loop's
locals), and its loads say nothing about an input's layout (fma_relayout, channels-last).
"""
from __future__ import annotations

from uniorch.ir.dims import prod as size_prod

from .contraction_ir import Lin, _TL, _Val, _elem, _is_shaped, _lin, _loc, _maps
from .contraction_plan import WINDOW_PRODUCER, _loop_sizes
from .contraction_reduce import output_env
from .source import CodegenError

TAP_DIM = 1 << 20


class _Windows:
    def windowed(self, op, result_no: int, idx: tuple, ctx: str) -> _Val:
        """The depthwise convolution `op`'s result `result_no` at `idx`, in factor tile `ctx`."""
        from .attention_plan import _plan  # late: attention_plan imports the emitter's modules

        if ctx not in ("a", "b"):
            raise CodegenError(op, "a depthwise producer read outside a factor tile")
        dp = _plan(op)
        if any(sc is not None for sc in dp.dot_scaled):
            raise CodegenError(op, "a depthwise producer with a scaled factor")
        n_in = len(op.opview.inputs)
        maps = _maps(op)
        sizes = _loop_sizes(op)
        env = output_env(op, maps[n_in + result_no], idx, consts=False)
        taps = [d for d, lin in enumerate(env) if lin is None and sizes[d] != 1]
        for d, lin in enumerate(env):
            if lin is None and sizes[d] == 1:
                env[d] = Lin.cst(0)
        count = size_prod([sizes[d] for d in taps])
        if not isinstance(count, int):
            raise CodegenError(op, "a depthwise producer with a symbolic window")
        t = self.fresh("tap")
        defs = []
        for i, d in enumerate(taps):
            inner = size_prod([sizes[e] for e in taps[i + 1:]])
            text = t if inner == 1 else f"{t} // {inner}"
            if i > 0:
                text += f" % {sizes[d]}"
            pd = TAP_DIM + len(self.tap_names)
            self.tap_names[pd] = f"{t}_{i}"
            defs.append(f"{t}_{i} = {text}")
            env[d] = Lin.dim(pd)
        init = self.value(op.opview.outputs[result_no], idx, ctx)  # before the loop: no tap in it
        body = op.regions[0].blocks[0]
        body_ops = [o.operation for o in body.operations]
        operands = list(op.opview.inputs)

        def arg(n: int) -> _Val:
            w = operands[n]
            if not _is_shaped(w):
                return self.scalar(w, op)
            return self.value(w, tuple(_lin(e, env, op) for e in maps[n].results), ctx)

        outer, memo, loads = self.loop, list(self.memo), (len(self.a_loads), len(self.b_loads))
        self.loop = []
        self.frames.append({"header": f"# depthwise producer, tap by tap: {op.name} at {_loc(op)}",
                            "loc": _loc(op), "done": set()})
        try:
            local: list = []
            factors = [self.body_value(op, body, body_ops, v, env, ctx, local, arg) for v in (dp.x, dp.y)]
        finally:
            self.frames.pop()
            inner_lines, self.loop, self.memo = self.loop, outer, memo
            del self.a_loads[loads[0]:]
            del self.b_loads[loads[1]:]
        acc_ty = "f64" if any(f.ty == "f64" for f in factors) else "f32"
        terms = [f.text if f.ty == acc_ty or f.const is not None else f"{f.text}.to({_TL[acc_ty]})"
                 for f in factors]
        wacc = self.fresh("wacc")
        shape = "(BLOCK_K, BLOCK_N)" if ctx == "b" else "(BLOCK_M, BLOCK_K)"
        self.loop.append(f"{wacc} = tl.full({shape}, 0.0, {_TL[acc_ty]})")
        self.loop.append(f"for {t} in range({count}):")
        self.loop += ["    " + ln for ln in defs + inner_lines]
        self.loop.append(f"    {wacc} = {wacc} + {terms[0]} * {terms[1]}")
        ty = _elem(op.results[result_no])
        text = wacc
        if init.const is None or float(init.const) != 0.0:
            init_text = init.text if init.ty == acc_ty else f"{init.text}.to({_TL[acc_ty]})"
            text = f"{wacc} + {init_text}"
        if ty != acc_ty:
            text = f"({text}).to({_TL[ty]})"
        cls = frozenset({"k", "n"} if ctx == "b" else {"m", "k"})
        return _Val(self.line(ctx, cls, text, "w"), ty, cls)


__all__ = ["TAP_DIM", "WINDOW_PRODUCER", "_Windows"]
