"""uniorch-fuse, reductions on a contraction's epilogue: a pooling whose windows do not overlap is
computed from per-window accumulators in the contraction's kernel, with pointwise ops after it;
a norm's per-chunk partial sums (passes/tile_stats.py) from the output tile. Mixed into
passes/fuse.py's `_Fusion`."""
from __future__ import annotations

from torch_mlir import ir

from uniorch.codegen import patterns as pat

from .fuse_common import _Group, _static


class WindowJoins:
    def try_join_window(self, g: _Group, x: ir.Operation) -> bool:
        """A pooling whose windows do not overlap joins the contraction kernel computing what it
        pools (conv → BatchNorm → ReLU → max pool): the kernel keeps one accumulator per window
        element and stores only the pooled tile, so the full-size activation is never written and
        nothing is computed twice. Only when nothing else reads the pooled tensor or any other
        value of the kernel, and the window runs along output dims one factor alone indexes (a
        convolution's pixels), so each window element is that factor's tile at shifted positions."""
        win = pat.pooling_window(x)
        members = set(g.ops)
        src = x.operands[0]
        if isinstance(src.owner, ir.Block) or self.top(src.owner) not in members:
            return False
        for m in g.ops:
            for r in m.results:
                if any(self.top(u.owner) not in members and pat.op_of(u.owner) != x for u in r.uses):
                    return False
        n_in = pat.num_inputs(x)
        for v in list(x.operands)[1:n_in]:  # the window's shape only
            if isinstance(v.owner, ir.Block) or pat.op_of(v.owner).name != "tensor.empty":
                return False
        init = x.operands[n_in]
        if isinstance(init.owner, ir.Block) or not pat.is_fill(pat.op_of(init.owner)):
            return False
        fill = pat.op_of(init.owner)
        if fill in self.group_of:
            return False
        # the windowed dims of the pooled tensor: pure domain dims read by one factor only
        a = g.anchor
        exprs = g.layout.result_exprs(self.top(src.owner), ir.OpResult(src).result_number)
        factors = [set().union(*[e.dims() for e in g.layout.operand_exprs(a, i)]) for i in range(pat.num_inputs(a))]
        sides = set()
        for (_, _, r, k), e in zip(win.dims, exprs):
            if r is None or k == 1:
                continue
            d = e.pure_dim()
            if d is None or d not in g.layout.domain.parallel:
                return False
            readers = [i for i, f in enumerate(factors) if d in f]
            if len(readers) != 1:
                return False
            sides.add(readers[0])
        if len(sides) != 1 or self.creates_cycle(g, x, [fill]):
            return False
        if any(pat.op_of(u.owner) != x for u in fill.results[0].uses):
            with ir.InsertionPoint(fill):  # a fill shared with others: this kernel builds its own
                fill = pat.op_of(fill.clone())
            x.operands[n_in] = fill.results[0]
            self.rebuild_graph()
        g.window = x
        self._adopt(g, fill)
        return self._adopt(g, x)

    def try_join_after_window(self, g: _Group, x: ir.Operation) -> bool:
        """A pointwise consumer of the pooled tile (average pooling's division, an activation
        after the pool) joins the kernel while it reads the group only there, element for element."""
        if not pat.is_pointwise(x) or not _static(x) or not x.results:
            return False
        if any(isinstance(v.type, ir.ShapedType) for v in pat.captured_values(x)):
            return False
        members = set(g.ops)
        after = self._after_window(g)
        maps = pat.indexing_maps(x)
        out_map = maps[pat.num_inputs(x)]
        shape = list(ir.RankedTensorType(g.window.results[0].type).shape)
        if pat.loop_sizes(x) != shape or str(out_map) != str(ir.AffineMap.get_identity(len(shape))):
            return False
        for v, mp in zip(x.operands, maps):
            if isinstance(v.owner, ir.Block) or self.top(v.owner) not in members:
                continue
            if self.top(v.owner) not in after or str(mp) != str(out_map):
                return False
        if self.creates_cycle(g, x):
            return False
        return self._adopt(g, x)

    def _after_window(self, g: _Group) -> list:
        """The pooling of g and the members computed from the pooled tile."""
        out = [g.window]
        for m in g.ops[g.ops.index(g.window) + 1:]:
            if any(not isinstance(v.owner, ir.Block) and self.top(v.owner) in out for v in m.operands):
                out.append(m)
        return out

    def try_join_tile_stat(self, g: _Group, x: ir.Operation) -> bool:
        """Partial sums over chunks of the output tile's rows (passes/tile_stats.py) join the
        contraction they sum, with the zero fill they start from: they read only its result or an
        epilogue value of it (and, for the centred sums, the plain sums already in the kernel).
        Not bound by the kernel's op count: passes/tile_stats.py rewrote the statistics to read
        them, so no other kernel could compute them."""
        if g.window is not None or not _static(x):
            return False
        members = set(g.ops)
        n_in = pat.num_inputs(x)
        src = pat.inputs(x)[0]
        p = None if isinstance(src.owner, ir.Block) else self.top(src.owner)
        if p not in members or (p != g.anchor and p in self._before_anchor(g)):
            return False  # not on the output tile (a factor's prologue)
        for v in pat.inputs(x)[1:]:
            if isinstance(v.owner, ir.Block) or self.top(v.owner) not in members:
                return False
        init = x.operands[n_in]
        fill = None if isinstance(init.owner, ir.Block) else pat.op_of(init.owner)
        if fill is None or not pat.is_fill(fill) or fill in self.group_of \
                or any(pat.op_of(u.owner) != x for u in fill.results[0].uses):
            return False
        if self.creates_cycle(g, x, [fill]):
            return False
        self._adopt(g, fill)
        return self._adopt(g, x)

