"""Pointwise/reduction/copy kernels, analysis: one kernel function's ops placed on its domain
(`Kernel`), with the constants and small helpers the other generic_* modules share."""
from __future__ import annotations

import math
import re

import sympy
from torch_mlir import ir

from uniorch.ir import dims

from . import body as B
from . import domain as D
from . import patterns as pat
from .source import CodegenError


PERSISTENT_MAX = 4096  # largest row (elements, 32-bit) reduced in registers
WIDE_COMBINERS = ("arith.addf", "arith.mulf")  # f16/bf16 ones accumulate in fp32 (min/max are exact)
LOOP_BLOCK_R = 1024  # chunk of a looped reduction
ALLOWED = ("linalg.generic", "tensor.empty", "arith.constant") + D.VIEW_OPS


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _numel(shape):
    """Elements of a shape: an int, or an expression when a dim is symbolic (uniorch/ir/dims.py)."""
    n = math.prod(shape) if shape else 1
    return int(n) if not isinstance(n, sympy.Expr) or n.is_number else n


def _vendor(target: str) -> str:
    return (target or "interpret").split(":", 1)[0]


def _warp_size(target: str) -> int:
    return 64 if _vendor(target) == "rocm" else 32


def _widen(ty: str, acc_ty: str) -> str:
    """Suffix converting a value of type `ty` to the accumulator type, if they differ."""
    return "" if ty == acc_ty else f".to({B.tl_type(acc_ty)})"


def _sym_name(func) -> str:
    return ir.StringAttr(pat.op_of(func).attributes["sym_name"]).value


def _ident(name: str) -> str:
    s = re.sub(r"\W", "_", name)
    return s if s and not s[0].isdigit() else "k_" + s


def _shape(v) -> list:
    """Dims of a value (symbolic ones as expressions: uniorch/ir/dims.py), or of a static type."""
    if isinstance(v, ir.Value):
        return dims.shape(v)
    return list(ir.RankedTensorType(v).shape)


def _short_loc(op) -> str:
    loc = str(op.location)
    return loc if len(loc) <= 240 else loc[:237] + "..."


# =================================================================================================
# analysis of one kernel function
# =================================================================================================
def _read_as_loads(op, block) -> bool:
    """A constant pad of a kernel argument, or a concatenation of kernel arguments, that only the
    kernel's generics read: masked loads there (generic_emit.padded, concatenated)."""
    from uniorch.passes.pad_views import pad_value

    if op.name not in ("tensor.pad", "tensor.concat"):
        return False
    if op.name == "tensor.pad" and (len(op.operands) != 1 or pad_value(op) is None):
        return False
    return (all(isinstance(v.owner, ir.Block) and v.owner == block for v in op.operands)
            and all(pat.op_of(u.owner).name == "linalg.generic" for u in op.results[0].uses))


class Kernel:
    def __init__(self, func):
        self.func = pat.op_of(func)
        if self.func.name != "func.func":
            raise CodegenError(self.func, "expected a func.func kernel")
        self.name = _sym_name(self.func)
        blk = self.func.regions[0].blocks[0]
        self.block = blk
        # a symbolic kernel's `index` arguments only size its `tensor.empty`s (passes/schedule.py);
        # the size symbols themselves are kernel parameters (`self.symbols`)
        self.symbolic = dims.has_symbols(self.func)
        self.args = [a for a in blk.arguments if not (self.symbolic and not isinstance(a.type, ir.ShapedType))]
        ops = [o.operation for o in blk.operations]
        self.ret = ops[-1]
        self.ops = ops[:-1]
        attrs = self.func.attributes
        self.kind = ir.StringAttr(attrs["uniorch.kind"]).value if "uniorch.kind" in attrs else None
        for a in self.args:
            if not isinstance(a.type, ir.RankedTensorType):
                raise CodegenError(self.func, f"kernel argument of type {a.type} (only tensors are passed)")
            if not ir.RankedTensorType(a.type).has_static_shape and not self.symbolic:
                raise CodegenError(self.func, "dynamic shapes are not supported")
        for r in self.ret.operands:
            if not isinstance(r.type, ir.RankedTensorType) or not (
                    ir.RankedTensorType(r.type).has_static_shape or self.symbolic):
                raise CodegenError(self.ret, "kernel results must be statically shaped tensors")
        self.hints = dims.hints(self.func)
        self.generics = [o for o in self.ops if o.name == "linalg.generic"]
        self.copy_ops = [o for o in self.ops if o.name in pat.COPY_OPS
                         and not (self.generics and _read_as_loads(o, blk))]
        if self.kind is None:
            self.kind = "copy" if self.copy_ops else ("reduction" if any(pat.is_reduction(g) for g in self.generics)
                                                      else "pointwise")
        if self.kind == "contraction":
            raise CodegenError(self.func, "contraction kernels use the contraction template")
        if self.kind == "copy":
            if len(self.copy_ops) != 1 or self.generics:
                raise CodegenError(self.func, "a copy kernel holds exactly one insert_slice/pad/concat")
            return
        for o in self.ops:
            if _read_as_loads(o, self.block):
                continue  # a pooling window's padded input, rotate_half
            if o.name not in ALLOWED:
                raise CodegenError(o, f"op not allowed in a {self.kind} kernel")
            if o.name in D.VIEW_OPS and not D.is_unit_view(o):
                raise CodegenError(o, "only reshapes that add or drop size-1 dims can be inside a kernel")
        self.views = [o for o in self.ops if o.name in D.VIEW_OPS]
        if not self.generics:
            raise CodegenError(self.func, "kernel has no linalg.generic")
        for g in self.generics:
            for t in list(g.operands) + list(g.results):
                if isinstance(t.type, ir.ShapedType) and not ir.ShapedType(t.type).has_static_shape:
                    try:
                        dims.shape(t)
                    except dims.UnknownSize as err:
                        raise CodegenError(g, f"symbolic sizes: {err}") from None
        has_red = any(pat.is_reduction(g) for g in self.generics)
        if self.kind == "pointwise" and has_red:
            raise CodegenError(self.func, "pointwise kernel holds a reduction")
        seed = next((g for g in self.generics if "uniorch.domain" in g.attributes), None)
        if seed is not None and has_red and not pat.is_reduction(seed):
            seed = None
        try:
            self.layout = D.solve(self.generics, seed=seed, allow_growth=not has_red, views=self.views)
        except ValueError as err:
            raise CodegenError(self.func, f"ops do not share one iteration domain: {err}") from None
        dom = self.layout.domain
        self.P = dom.parallel
        self.R = dom.reduction
        if has_red and not self.R and not any(pat.is_reduction(g) for g in self.generics):
            raise CodegenError(self.func, "no reduction dims")
        self.reductive = has_red
        self._order_dims()
        # levels and phases
        self.level: dict[ir.Operation, str] = {}
        for g in self.generics:
            if pat.is_reduction(g):
                self.level[g] = "reduce"
            elif any(dom.kinds[d] == "reduction" for l in self.layout.loops[g] for d in l.dims()):
                self.level[g] = "full"
            else:
                self.level[g] = "row"
        self.deps: dict[ir.Operation, list[ir.Operation]] = {}
        for g in self.generics:
            inf = self.layout.info(g)
            ds = []
            for i, v in enumerate(inf.operands):
                prod = self.layout.producer_of(v)
                if prod is not None and inf.used[i] and prod[0] not in ds:
                    ds.append(prod[0])
            for v in pat.captured_values(g):
                if isinstance(v.type, ir.ShapedType) and self.layout.producer_of(v) is not None:
                    raise CodegenError(g, "gathers from a tensor computed in the same kernel")
            self.deps[g] = ds
        self.phase: dict[ir.Operation, int] = {}
        self.ready: dict[ir.Operation, int] = {}
        for g in self.generics:
            req = 0
            for p in self.deps[g]:
                req = max(req, self.ready[p] if self.level[p] != "full" else self.phase[p])
            if self.level[g] == "reduce":
                self.phase[g] = req
                self.ready[g] = req + 1
            elif self.level[g] == "row":
                self.ready[g] = req
            else:
                self.phase[g] = req
        self.n_phases = 1 + max((self.phase[g] for g in self.generics if self.level[g] == "reduce"), default=-1)
        self.combiners = {g: pat.reduction_combiners(g) for g in self.generics if self.level[g] == "reduce"}
        # kernel results
        self.stores: list[tuple[int, ir.Operation, int]] = []
        for k, v in enumerate(self.ret.operands):
            prod = self.layout.producer_of(v)
            if prod is None:
                raise CodegenError(self.ret, f"result {k} is not computed by a linalg.generic of the kernel")
            if not self.layout.storable(*prod):
                raise CodegenError(prod[0], f"result {prod[1]} is not computed once per element")
            self.stores.append((k, prod[0], prod[1]))
        self.store_shapes = [_shape(v) for v in self.ret.operands]

    def _order_dims(self) -> None:
        """Flattening order (outer → inner) of parallel and reduction dims: the largest stored
        result's (then the largest input's) dim order, so its innermost dim is the fastest lane."""
        lay = self.layout
        cands = []
        for v in self.ret.operands:
            prod = lay.producer_of(v)
            if prod is not None:
                cands.append((self.hint(_numel(_shape(v))), lay.produced_exprs(*prod, _shape(v))))
        for g in self.generics:
            inf = lay.info(g)
            for i, v in enumerate(inf.operands):
                if inf.used[i] and isinstance(v.type, ir.RankedTensorType) and lay.producer_of(v) is None:
                    cands.append((self.hint(_numel(_shape(v))) * 0.5, lay.operand_exprs(g, i)))
        cands.sort(key=lambda c: -c[0])

        def order(dims, cs):
            out = []
            for _, ex in cs:
                for e in ex:
                    d = e.pure_dim()
                    if d in dims and d not in out:
                        out.append(d)
            return out + [d for d in dims if d not in out]

        # parallel: by the biggest result; reduction: by the biggest input read over it
        self.order_p = order(self.P, cands)
        self.order_r = order(self.R, [c for c in cands if any(e.pure_dim() in self.R for e in c[1])])
        self.names = {d: f"p{i}" for i, d in enumerate(self.order_p)}
        self.names.update({d: f"r{i}" for i, d in enumerate(self.order_r)})

    # sizes
    @property
    def np_(self) -> int:
        return _numel([self.layout.domain.sizes[d] for d in self.P])

    @property
    def nr(self) -> int:
        return _numel([self.layout.domain.sizes[d] for d in self.R])

    @property
    def symbols(self) -> list[str]:
        """Size symbols the kernel takes as parameters, after its tensors (uniorch/ir/dims.py)."""
        if not self.symbolic:
            return []
        return dims.kernel_symbols(self.func, [_shape(a) for a in self.args] + [_shape(r) for r in self.ret.operands])

    def hint(self, n) -> int:
        """A size at the capture's example sizes: what schedules are tuned for."""
        return dims.hinted(n, self.hints)

    def max_numel(self) -> int:
        n = [self.np_ * self.nr]
        n += [_numel(_shape(a)) for a in self.args]
        n += [_numel(_shape(r)) for r in self.ret.operands]
        return max(self.hint(x) for x in n)

    def elem_bits(self) -> int:
        bits = 32
        for g in self.generics:
            for t in list(g.operands) + list(g.results):
                try:
                    name = B.elem_name(t.type)
                except KeyError:
                    continue
                bits = max(bits, 64 if name in ("f64", "i64") else 32)
        return bits
