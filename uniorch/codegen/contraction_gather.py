"""Contraction kernels, emission: a gather in a factor's prologue (`tensor.extract` at computed
indices: nearest or bilinear upsampling, a reflect pad, before a convolution or matmul). The
gathered tensor is read where the factor tile needs it, so the upsampled or padded copy is never
written. Mixed into contraction_emit.py's `_Emitter`."""
from __future__ import annotations

from uniorch.ir.dims import code as size_code

from .contraction_ir import _PTR, _Val, _elem, _is_float, _loc, _shape
from .source import CodegenError


class _Gathers:
    def gather(self, d, idx: list[_Val], ctx: str) -> _Val:
        """`tensor.extract` of kernel argument `d.operands[0]` at the index values `idx`: a masked
        load (out of bounds and outside the tile read 0, as generic kernels do). Under a pad or a
        concatenation piece the load also takes their conditions, since its address is only
        meaningful where they hold."""
        src = d.operands[0]
        i = next((j for j, a in enumerate(self.p.args) if a == src), None)
        if i is None:
            raise CodegenError(d, "gathers only from kernel inputs")
        ty = _elem(src)
        if ty not in _PTR:
            raise CodegenError(d, f"gather from a tensor of element type {ty}")
        terms, conds, cls = [], [], set()
        for j, (iv, size) in enumerate(zip(idx, _shape(src))):
            if iv.const is not None:
                c = int(iv.const)
                if isinstance(size, int) and not 0 <= c < size:
                    raise CodegenError(d, f"constant index {c} out of bounds of dim {j} (size {size})")
                if c:
                    terms.append(f"{c} * in{i}_s{j}")
                continue
            cls |= set(iv.cls)
            conds.append(f"({iv.text} >= 0) & ({iv.text} < {size_code(size)})")
            terms.append(f"({iv.text}) * in{i}_s{j}")
        outer = []
        for inside, bounded in self.inside:
            outer += inside
            cls |= set().union(*[self.lin_cls(lin) for lin in bounded]) if bounded else set()
        tile = self.mask(cls, ctx)
        mask = " & ".join(([tile] if tile else []) + outer + conds)
        addr = f"in{i}_ptr" + "".join(f" + {t}" for t in terms)
        other = "0.0" if _is_float(ty) else "0"
        text = f"tl.load({addr}, mask={mask}, other={other})" if mask else f"tl.load({addr})"
        if ctx == "a":
            self.a_inputs.add(i)
        name = self.line(ctx, cls, text, f"{ctx}_gather{i}_", _loc(d))
        return _Val(name, ty, frozenset(cls))
