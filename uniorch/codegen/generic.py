"""Triton for pointwise, reduction and copy kernels (docs/kernels.md §4).

One kernel function holds the `linalg.generic`s of a fused group. `domain.solve` places every op's
loops on the group's domain (parallel dims `p0..`, reduction dims `r0..`); then:

* pointwise: one program per BLOCK lanes of the flattened parallel domain, 1-D values.
* reduction: programs own BLOCK_P rows (flattened parallel dims); rows are swept in chunks of
  BLOCK_R (flattened reduction dims). Values are [BLOCK_P, 1] (row values) or [BLOCK_P, BLOCK_R].
  A reduction whose body is `comb(out, f(ins))` with a known combiner reduces each chunk with
  `tl.reduce` and our own `@jit` combine function; a row that fits one block is reduced in
  registers ("persistent"), otherwise chunks are accumulated in a loop ("looped"). Reductions that
  need an earlier one's result (softmax's sum needs its max) run in later *phases*; looped phases
  re-read their inputs. Any other body (argmax) runs serially over the reduction index, exactly
  as written, vectorised over the rows.
* copy: `tensor.pad` / `tensor.concat` / `tensor.insert_slice`, one lane per written element.

Unsupported IR raises CodegenError; a kernel is never emitted on a guess.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from torch_mlir import ir

from . import body as B
from . import domain as D
from . import patterns as pat
from .source import CodegenError, KernelSource

PERSISTENT_MAX = 4096  # largest row (elements, 32-bit) reduced in registers
WIDE_COMBINERS = ("arith.addf", "arith.mulf")  # f16/bf16 ones accumulate in fp32 (min/max are exact)
LOOP_BLOCK_R = 1024  # chunk of a looped reduction
ALLOWED = ("linalg.generic", "tensor.empty", "arith.constant") + D.VIEW_OPS


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _numel(shape) -> int:
    return int(math.prod(shape)) if shape else 1


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


def _shape(t) -> list[int]:
    return list(ir.RankedTensorType(t).shape)


def _short_loc(op) -> str:
    loc = str(op.location)
    return loc if len(loc) <= 240 else loc[:237] + "..."


# =================================================================================================
# analysis of one kernel function
# =================================================================================================
class Kernel:
    def __init__(self, func):
        self.func = pat.op_of(func)
        if self.func.name != "func.func":
            raise CodegenError(self.func, "expected a func.func kernel")
        self.name = _sym_name(self.func)
        blk = self.func.regions[0].blocks[0]
        self.block = blk
        self.args = list(blk.arguments)
        ops = [o.operation for o in blk.operations]
        self.ret = ops[-1]
        self.ops = ops[:-1]
        attrs = self.func.attributes
        self.kind = ir.StringAttr(attrs["uniorch.kind"]).value if "uniorch.kind" in attrs else None
        for a in self.args:
            if not isinstance(a.type, ir.RankedTensorType):
                raise CodegenError(self.func, f"kernel argument of type {a.type} (only tensors are passed)")
            if not ir.RankedTensorType(a.type).has_static_shape:
                raise CodegenError(self.func, "dynamic shapes are not supported")
        for r in self.ret.operands:
            if not isinstance(r.type, ir.RankedTensorType) or not ir.RankedTensorType(r.type).has_static_shape:
                raise CodegenError(self.ret, "kernel results must be statically shaped tensors")
        self.copy_ops = [o for o in self.ops if o.name in pat.COPY_OPS]
        self.generics = [o for o in self.ops if o.name == "linalg.generic"]
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
                    raise CodegenError(g, "dynamic shapes are not supported")
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
        self.store_shapes = [_shape(v.type) for v in self.ret.operands]

    def _order_dims(self) -> None:
        """Flattening order (outer → inner) of parallel and reduction dims: the largest stored
        result's (then the largest input's) dim order, so its innermost dim is the fastest lane."""
        lay = self.layout
        cands = []
        for v in self.ret.operands:
            prod = lay.producer_of(v)
            if prod is not None:
                cands.append((_numel(_shape(v.type)), lay.produced_exprs(*prod, _shape(v.type))))
        for g in self.generics:
            inf = lay.info(g)
            for i, v in enumerate(inf.operands):
                if inf.used[i] and isinstance(v.type, ir.RankedTensorType) and lay.producer_of(v) is None:
                    cands.append((_numel(_shape(v.type)) * 0.5, lay.operand_exprs(g, i)))
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

    def max_numel(self) -> int:
        n = [self.np_ * self.nr]
        n += [_numel(_shape(a.type)) for a in self.args]
        n += [_numel(_shape(r.type)) for r in self.ret.operands]
        return max(n)

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


# =================================================================================================
# schedules
# =================================================================================================
def _sched_from_attr(func) -> dict | None:
    attrs = pat.op_of(func).attributes
    if "uniorch.schedule" not in attrs:
        return None
    out = {}
    for na in ir.DictAttr(attrs["uniorch.schedule"]):
        a = na.attr
        if isinstance(a, ir.BoolAttr):
            out[na.name] = bool(a.value)
        elif isinstance(a, ir.IntegerAttr):
            out[na.name] = int(a.value)
        elif isinstance(a, ir.ArrayAttr):
            out[na.name] = [ir.IntegerAttr(x).value for x in a]
        else:
            out[na.name] = str(a)
    return out


def _warps(elems: int, target: str) -> int:
    w = 8 if elems >= 4096 else 4 if elems >= 512 else 2 if elems >= 128 else 1
    if _warp_size(target) == 64:
        w = max(1, w // 2)
    return w


def choose_schedule(kernel_func, target: str) -> dict:
    """Block sizes, warps and grid for a pointwise / reduction / copy kernel on `target`.

    For a copy kernel writing a slice into a buffer it reads (`tensor.insert_slice` into a kernel
    argument), also records `uniorch.inplace` on the kernel: result 0 is written into that input.
    """
    k = Kernel(kernel_func)
    interp = _vendor(target) == "interpret"
    if k.kind == "copy":
        n = _copy_numel(k)
        _mark_inplace(k)
        block = min(_next_pow2(n), 16384 if interp else 1024)
        return {"block_p": block, "block_r": 1, "block_k": 0, "num_warps": _warps(block, target),
                "num_stages": 1, "looped": False, "grid": [_cdiv(n, block), 1, 1]}
    budget = 16384 if interp else (4096 if k.elem_bits() <= 32 else 2048)
    if not k.reductive:
        n = k.np_
        block = min(_next_pow2(n), budget if interp else 1024)
        return {"block_p": block, "block_r": 1, "block_k": 0, "num_warps": _warps(block, target),
                "num_stages": 1, "looped": False, "grid": [_cdiv(n, block), 1, 1]}
    nr, np_ = k.nr, k.np_
    any_tree = any(c is not None for c in k.combiners.values())
    limit = PERSISTENT_MAX if k.elem_bits() <= 32 else PERSISTENT_MAX // 2
    if not any_tree:
        block_r, looped = 1, False
    elif _next_pow2(nr) <= limit:
        block_r, looped = _next_pow2(nr), False
    else:
        block_r, looped = LOOP_BLOCK_R, True
    block_p = max(1, min(_next_pow2(np_), budget // block_r, 1024 if interp else 256))
    return {"block_p": block_p, "block_r": block_r, "block_k": 0,
            "num_warps": _warps(block_p * block_r, target), "num_stages": 1, "looped": looped,
            "grid": [_cdiv(np_, block_p), 1, 1]}


# =================================================================================================
# code emission
# =================================================================================================
@dataclass
class Val:
    code: str
    ty: str  # MLIR element type name
    lanes: frozenset = frozenset()  # "p": varies over rows, "r": over the chunk's columns
    const: object = None


class _Scope:
    """Where values live: the row scope (outside loops) or one chunk scope (one loop body, or the
    single persistent chunk). Chunk scopes see row values; row values they need are emitted
    before the loop."""

    def __init__(self, kind: str, lines: list[str], indent: str, parent: "_Scope | None" = None,
                 names: dict | None = None):
        self.kind = kind  # "row" | "chunk" | "serial"
        self.lines = lines
        self.indent = indent
        self.parent = parent
        self.memo: dict = {}
        self.loads: dict = {}
        self.names = names if names is not None else (parent.names if parent else {})

    def emit(self, text: str) -> None:
        self.lines.append(self.indent + text)

    @property
    def root(self) -> "_Scope":
        return self.parent.root if self.parent else self


class _Emitter:
    def __init__(self, k: Kernel, sched: dict, target: str):
        self.k = k
        self.sched = sched
        self.target = target
        self.lay = k.layout
        self.counter = 0
        self.combine_fns: dict[str, str] = {}
        self.arg_index = {a: i for i, a in enumerate(k.args)}
        self.idx64 = k.max_numel() >= 2 ** 31
        self.consts: dict = {}
        for o in k.ops:
            if o.name == "arith.constant":
                self.consts[o.results[0]] = o

    # -- names ------------------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def op_label(self, g) -> str:
        return f"op{self.k.generics.index(g)}"

    # -- constants --------------------------------------------------------------------------------
    def constant(self, op: ir.Operation) -> Val:
        attr = op.attributes["value"]
        t = op.results[0].type
        if isinstance(t, ir.ShapedType):
            dense = ir.DenseElementsAttr(attr)
            if not dense.is_splat:
                raise CodegenError(op, "non-splat tensor constant inside a kernel")
            attr = dense.get_splat_value()
            t = ir.ShapedType(t).element_type
        name = B.type_name(t)
        if name in B.FLOATS:
            value = ir.FloatAttr(attr).value
        else:
            value = ir.IntegerAttr(attr).value
            if name == "i1":
                value = 1 if value else 0
        return Val(B.constant_expr(value, name), name, frozenset(), value)

    def scalar(self, v: ir.Value) -> Val:
        owner = v.owner
        if isinstance(owner, ir.Block) or pat.op_of(owner).name != "arith.constant":
            raise CodegenError(self.k.func, f"scalar operand {v.get_name()} is not a constant")
        return self.constant(pat.op_of(owner))

    # -- lanes and masks --------------------------------------------------------------------------
    def lanes_of(self, dims) -> frozenset:
        kinds = self.lay.domain.kinds
        out = set()
        for d in dims:
            out.add("r" if kinds[d] == "reduction" else "p")
        return frozenset(out)

    def mask_for(self, scope: _Scope, lanes) -> str | None:
        parts = []
        if "p" in lanes:
            parts.append("row_mask")
        if "r" in lanes and scope.kind == "chunk":
            parts.append("col_mask")
        return " & ".join(parts) if parts else None

    def code(self, e: D.Aff, scope: _Scope) -> str:
        return e.code(scope.names, self.lay.domain.sizes)

    # -- loads ------------------------------------------------------------------------------------
    def load(self, scope: _Scope, arg: int, exprs: list[D.Aff], ty: str, why: str) -> Val:
        shape = _shape(self.k.args[arg].type)
        dims = set()
        for e, s in zip(exprs, shape):
            if s != 1:
                dims |= e.dims()
        lanes = self.lanes_of(dims)
        if "r" not in lanes and scope.kind != "row":
            return self.load(scope.root, arg, exprs, ty, why)
        key = (arg, tuple(e for e, s in zip(exprs, shape) if s != 1))
        if key in scope.loads:
            return scope.loads[key]
        terms = [f"({self.code(e, scope)}) * in{arg}_s{j}" for j, (e, s) in enumerate(zip(exprs, shape))
                 if s != 1 and not (e.is_const() and e.const == 0)]
        addr = f"in{arg}_ptr" + "".join(" + " + t for t in terms)
        mask = self.mask_for(scope, lanes)
        name = self.fresh(f"in{arg}_")
        if mask:
            other = "1.0" if ty in B.FLOATS else "0"  # masked lanes: a value every math op takes
            scope.emit(f"{name} = tl.load({addr}, mask={mask}, other={other})  # {why}")
        else:
            scope.emit(f"{name} = tl.load({addr})  # {why}")
        val = Val(name, ty, lanes)
        scope.loads[key] = val
        return val

    # -- values of tensors --------------------------------------------------------------------------
    def operand(self, scope: _Scope, g: ir.Operation, i: int) -> Val:
        inf = self.lay.info(g)
        v = inf.operands[i]
        if not isinstance(v.type, ir.ShapedType):
            return self.scalar(v)
        ty = B.elem_name(v.type)
        base = self.lay.through_views(v)
        if base is not v and isinstance(base.type, ir.RankedTensorType):
            if isinstance(base.owner, ir.Block) or pat.op_of(base.owner).name != "linalg.generic":
                exprs = D.realign(self.lay.operand_exprs(g, i), _shape(v.type), _shape(base.type))
                if isinstance(base.owner, ir.Block):
                    return self.load(scope, self.arg_index[base], exprs, ty, f"{base.get_name()} (viewed) of {self.op_label(g)}")
                v = base
        if isinstance(v.owner, ir.Block):
            if v.owner != self.k.block:
                raise CodegenError(g, "operand defined in an enclosing region")
            exprs = self.lay.operand_exprs(g, i)
            return self.load(scope, self.arg_index[v], exprs, ty, f"{v.get_name()} of {self.op_label(g)}")
        owner = pat.op_of(v.owner)
        if owner.name == "arith.constant":
            return self.constant(owner)
        if owner.name == "tensor.empty":
            raise CodegenError(g, "reads an uninitialised tensor (tensor.empty)")
        prod = self.lay.producer_of(v)
        if prod is None:
            raise CodegenError(g, f"operand {i} comes from '{owner.name}', not from the kernel's ops")
        return self.result(scope, *prod)

    def result(self, scope: _Scope, g: ir.Operation, r: int) -> Val:
        level = self.k.level[g]
        target = scope.root if level != "full" else scope
        if level == "full" and scope.kind == "row":
            raise CodegenError(g, "internal: a full-row value requested outside a chunk")
        key = (g, r)
        if key not in target.memo:
            if level == "reduce":
                raise CodegenError(g, "internal: reduction result used before its phase")
            self.evaluate(target, g)
        return target.memo[key]

    def evaluate(self, scope: _Scope, g: ir.Operation) -> None:
        """Computes a pointwise generic's results in `scope`."""
        inf = self.lay.info(g)
        scope.emit(f"# {self.op_label(g)}: linalg.generic ({self.k.level[g]}) at {_short_loc(g)}")
        env = self.bind_args(scope, g)
        y = pat.yield_op(g)
        outs = [self.body_value(scope, g, env, v) for v in y.operands]
        for r, val in enumerate(outs):
            if val.code.startswith("tl.full(") or not re.fullmatch(r"\w+", val.code):
                name = f"{self.op_label(g)}_{r}"
                scope.emit(f"{name} = {val.code}")
                val = Val(name, val.ty, val.lanes, val.const)
            scope.memo[(g, r)] = val
        del inf

    def bind_args(self, scope: _Scope, g: ir.Operation, skip_outs: bool = False) -> dict:
        inf = self.lay.info(g)
        blk = pat.body(g)
        env: dict = {}
        for i, a in enumerate(blk.arguments):
            if not inf.used[i] or (skip_outs and i >= inf.n_in):
                continue
            env[a] = ("lazy", i)
        return env

    def body_value(self, scope: _Scope, g: ir.Operation, env: dict, v: ir.Value) -> Val:
        got = env.get(v)
        if isinstance(got, Val):
            return got
        if isinstance(got, tuple):
            val = self.operand(scope, g, got[1])
            env[v] = val
            return val
        owner = v.owner
        if isinstance(owner, ir.Block):
            if owner == self.k.block:
                raise CodegenError(g, "a kernel argument used as a scalar in a body")
            raise CodegenError(g, "block argument not bound")
        op = pat.op_of(owner)
        if op.name == "arith.constant":
            val = self.constant(op)
            env[v] = val
            return val
        if not self._inside(op, g):
            raise CodegenError(g, f"body uses {op.name} defined outside it")
        self.body_op(scope, g, env, op)
        return env[v]

    @staticmethod
    def _inside(op: ir.Operation, g: ir.Operation) -> bool:
        p = op.parent
        while p is not None:
            if p == g:
                return True
            p = p.parent
        return False

    def body_op(self, scope: _Scope, g: ir.Operation, env: dict, op: ir.Operation) -> None:
        name = op.name
        if name == "linalg.index":
            dim = ir.IntegerAttr(op.attributes["dim"]).value
            e = self.lay.loops[g][dim]
            lanes = self.lanes_of(e.dims())
            if e.is_const():
                env[op.results[0]] = Val(B.constant_expr(e.const, "index"), "index", frozenset(), e.const)
            else:
                var = self.fresh("idx")
                scope.emit(f"{var} = ({self.code(e, scope)}).to(tl.int64)  # linalg.index {dim}")
                env[op.results[0]] = Val(var, "index", lanes)
            return
        if name == "tensor.extract":
            self.gather(scope, g, env, op)
            return
        if name == "cf.assert":
            scope.emit(f"# cf.assert dropped (kernels cannot raise): {op.attributes['msg']}")
            return
        if name == "affine.apply":
            amap = ir.AffineMapAttr(op.attributes["map"]).value
            args = [self.body_value(scope, g, env, x) for x in op.operands]
            names = [a.code for a in args]
            expr = _affine_code(amap.results[0], names[: amap.n_dims], names[amap.n_dims:])
            var = self.fresh("t")
            scope.emit(f"{var} = {expr}  # affine.apply {amap}")
            lanes = frozenset().union(*[a.lanes for a in args]) if args else frozenset()
            env[op.results[0]] = Val(var, "index", lanes)
            return
        if len(op.results) != 1 or op.regions and len(op.regions):
            raise CodegenError(op, "unsupported op in a linalg body")
        args = [self.body_value(scope, g, env, x) for x in op.operands]
        rty = B.type_name(op.results[0].type) if _known_type(op.results[0].type) else None
        if rty is None or any(a.ty is None for a in args):
            raise CodegenError(op, f"unsupported element type {op.results[0].type}")

        def const_of(i):
            return args[i].const if i < len(args) else None

        if args and all(a.const is not None for a in args):
            folded = _fold(op, [a.const for a in args], rty)
            if folded is not None:  # constants stay Python values (no 0-d tensor arithmetic)
                env[op.results[0]] = Val(B.constant_expr(folded, rty), rty, frozenset(), folded)
                return

        expr = B.expression(op, [a.code for a in args], [a.ty for a in args], rty, const_of)
        lanes = frozenset().union(*[a.lanes for a in args]) if args else frozenset()
        var = self.fresh("t")
        scope.emit(f"{var} = {expr}  # {name}")
        env[op.results[0]] = Val(var, rty, lanes)

    def gather(self, scope: _Scope, g: ir.Operation, env: dict, op: ir.Operation) -> None:
        src = op.operands[0]
        if not isinstance(src.owner, ir.Block) or src.owner != self.k.block:
            raise CodegenError(op, "gathers only from kernel inputs")
        a = self.arg_index[src]
        shape = _shape(src.type)
        idx = [self.body_value(scope, g, env, x) for x in list(op.operands)[1:]]
        lanes = frozenset().union(*[i.lanes for i in idx]) if idx else frozenset()
        conds = []
        terms = []
        for j, (iv, s) in enumerate(zip(idx, shape)):
            if iv.const is not None:  # a constant index: checked here, not in the kernel
                if not 0 <= int(iv.const) < s:
                    raise CodegenError(op, f"constant index {iv.const} out of bounds of dim {j} (size {s})")
                if int(iv.const) != 0:
                    terms.append(f"{int(iv.const)} * in{a}_s{j}")
                continue
            conds.append(f"({iv.code} >= 0) & ({iv.code} < {s})")
            terms.append(f"{iv.code} * in{a}_s{j}")
        lane_mask = self.mask_for(scope, lanes)
        mask = " & ".join(([lane_mask] if lane_mask else []) + conds)
        addr = f"in{a}_ptr" + "".join(" + " + t for t in terms)
        var = self.fresh("gather")
        ty = B.elem_name(src.type)
        if mask:
            scope.emit(f"{var} = tl.load({addr}, mask={mask}, other=0)  # tensor.extract, out of bounds -> 0")
        else:
            scope.emit(f"{var} = tl.load({addr})  # tensor.extract")
        env[op.results[0]] = Val(var, ty, lanes)

    # -- stores -----------------------------------------------------------------------------------
    def store(self, scope: _Scope, k: int, g: ir.Operation, r: int) -> None:
        val = self.result(scope, g, r)
        shape = self.k.store_shapes[k]  # the returned value's (a unit view of the result's)
        exprs = self.lay.produced_exprs(g, r, shape)
        used = set()
        terms = []
        for j, (e, s) in enumerate(zip(exprs, shape)):
            if s == 1:
                continue
            used |= e.dims()
            terms.append(f"({self.code(e, scope)}) * out{k}_s{j}")
        scope_dims = set(self.k.P) | (set(self.k.R) if scope.kind != "row" else set())
        dedup = [f"({scope.names[d]} == 0)" for d in sorted(scope_dims - used, key=lambda d: self.k.names[d])]
        lanes = {"p"} | ({"r"} if scope.kind == "chunk" else set())
        zero = "row_zero" if scope.kind != "chunk" else "full_zero"
        addr = f"out{k}_ptr + {zero}" + "".join(" + " + t for t in terms)
        mask = " & ".join([self.mask_for(scope, lanes)] + dedup)
        scope.emit(f"tl.store({addr}, {val.code}, mask={mask})  # result {k}: {self.op_label(g)}#{r}")

    # -- kernel skeleton --------------------------------------------------------------------------
    def signature(self) -> list[str]:
        return _params(self.k)

    def decompose(self, scope: _Scope, flat: str, dims: list[int], suffix: str = "") -> None:
        sizes = self.lay.domain.sizes
        stride = 1
        strides = {}
        for d in reversed(dims):
            strides[d] = stride
            stride *= sizes[d]
        for pos, d in enumerate(dims):
            text = flat if strides[d] == 1 else f"{flat} // {strides[d]}"
            if pos > 0:
                text = f"({text}) % {sizes[d]}"
            scope.emit(f"{scope.names[d]} = {text}{suffix}")

    def run(self) -> str:
        k = self.k
        body: list[str] = []
        root = _Scope("row", body, "    ", names=dict(k.names))
        self.root = root
        dom = self.lay.domain
        sizes = dom.sizes
        root.emit(f"# domain: parallel {[sizes[d] for d in k.order_p]} ({', '.join(k.names[d] for d in k.order_p) or '-'})"
                  + (f", reduction {[sizes[d] for d in k.order_r]} ({', '.join(k.names[d] for d in k.order_r) or '-'})"
                     if k.reductive else ""))
        for i, a in enumerate(k.args):
            root.emit(f"# in{i}: {a.get_name()} : {a.type}")
        for i, v in enumerate(k.ret.operands):
            root.emit(f"# out{i}: {v.type}")
        pid = "tl.program_id(0).to(tl.int64)" if self.idx64 else "tl.program_id(0)"
        root.emit(f"pid = {pid}")
        if not k.reductive:
            root.emit(f"rows = pid * BLOCK + tl.arange(0, BLOCK)")
            root.emit(f"row_mask = rows < {k.np_}")
            root.emit("row_zero = rows * 0")
            self.decompose(root, "rows", k.order_p)
            for idx, g, r in k.stores:
                self.store(root, idx, g, r)
            return self.finish(body, ["BLOCK"])
        root.emit(f"rows = pid * BLOCK_P + tl.arange(0, BLOCK_P)[:, None]")
        root.emit(f"row_mask = rows < {k.np_}")
        root.emit("row_zero = rows * 0")
        self.decompose(root, "rows", k.order_p)
        self.persistent = not (self.sched.get("looped") or self.sched["block_r"] < k.nr)
        self.out = []  # emitted (flushed) lines
        self.persistent_scope = None
        done_stores: set = set()
        full_stores = [(i, g, r) for i, g, r in k.stores if k.level[g] == "full"]
        for phase in range(k.n_phases + 1):
            reds = [g for g in k.generics if k.level[g] == "reduce" and k.phase[g] == phase]
            tree = [g for g in reds if k.combiners[g] is not None]
            serial = [g for g in reds if k.combiners[g] is None]
            stores_here = [s for s in full_stores if k.phase[s[1]] == phase and s not in done_stores]
            if tree or (stores_here and not serial):
                self.chunk_loop(phase, tree, stores_here)
                done_stores |= set(stores_here)
                stores_here = []
            if serial:
                self.serial_loop(serial, stores_here)
                done_stores |= set(stores_here)
        for idx, g, r in k.stores:
            if k.level[g] != "full":
                self.store(root, idx, g, r)
        self.flush()
        return self.finish(self.out, ["BLOCK_P", "BLOCK_R"])

    def flush(self) -> None:
        self.out.extend(self.root.lines)
        self.root.lines.clear()

    def chunk_scope(self) -> tuple[_Scope, list[str] | None]:
        k = self.k
        if self.persistent:
            if self.persistent_scope is None:
                sc = _Scope("chunk", self.root.lines, "    ", self.root)
                sc.emit("cols = tl.arange(0, BLOCK_R)[None, :]" + (".to(tl.int64)" if self.idx64 else ""))
                sc.emit(f"col_mask = cols < {k.nr}")
                sc.emit("full_zero = row_zero + cols * 0")
                self.decompose(sc, "cols", k.order_r)
                self.persistent_scope = sc
            return self.persistent_scope, None
        lines: list[str] = []
        sc = _Scope("chunk", lines, "        ", self.root)
        sc.emit("cols = r_start + tl.arange(0, BLOCK_R)[None, :]" + (".to(tl.int64)" if self.idx64 else ""))
        sc.emit(f"col_mask = cols < {k.nr}")
        sc.emit("full_zero = row_zero + cols * 0")
        self.decompose(sc, "cols", k.order_r)
        return sc, lines

    def chunk_loop(self, phase: int, tree: list, stores: list) -> None:
        k = self.k
        root = self.root
        accs = {}
        for g in tree:
            inf = self.lay.info(g)
            for j, (comb, _) in enumerate(k.combiners[g]):
                init = self.operand(root, g, inf.n_in + j)
                ty = B.elem_name(g.results[j].type)
                # sums and products of f16/bf16 accumulate in fp32 and round once at the end, as
                # PyTorch's kernels do: a 16-bit running sum stops growing once the increments
                # fall below half its ulp (65536 ones sum to 2048 in fp16, 256 in bf16)
                acc_ty = "f32" if ty in ("f16", "bf16") and comb in WIDE_COMBINERS else ty
                acc = f"acc{k.generics.index(g)}_{j}"
                start = f"tl.broadcast_to({init.code}, (BLOCK_P, 1))" + _widen(ty, acc_ty)
                if not self.persistent:
                    root.emit(f"{acc} = {start}  # init of {self.op_label(g)}#{j}")
                accs[(g, j)] = (acc, start, comb, acc_ty)
        sc, lines = self.chunk_scope()
        for g in tree:
            sc.emit(f"# {self.op_label(g)}: reduction at {_short_loc(g)}")
            env = self.bind_args(sc, g, skip_outs=True)
            for j, (comb, other) in enumerate(k.combiners[g]):
                acc, start, _, acc_ty = accs[(g, j)]
                v = self.body_value(sc, g, env, other)
                fn = self.combine_fn(comb, g, acc_ty)
                ident = B.constant_expr(B.identity_value(pat.COMBINERS[comb], acc_ty), acc_ty)
                part = self.fresh("part")
                x = f"({v.code}){_widen(v.ty, acc_ty)}"
                sc.emit(f"{part} = tl.reduce(tl.where(row_mask & col_mask, {x}, {ident}), 1, {fn}, keep_dims=True)")
                if self.persistent:
                    sc.emit(f"{acc} = {fn}({start}, {part})")
                else:
                    sc.emit(f"{acc} = {fn}({acc}, {part})")
        for idx, g, r in stores:
            self.store(sc, idx, g, r)
        if lines is not None:
            self.flush()
            self.out.append(f"    for r_start in range(0, {k.nr}, BLOCK_R):  # phase {phase}")
            self.out.extend(lines)
        for (g, j), (acc, _start, _comb, acc_ty) in accs.items():
            ty = B.elem_name(g.results[j].type)
            if acc_ty != ty:  # the single rounding of a widened accumulator
                root.emit(f"{acc}_out = {acc}.to({B.tl_type(ty)})")
                acc = f"{acc}_out"
            root.memo[(g, j)] = Val(acc, ty, frozenset({"p"}))

    def serial_loop(self, reds: list, stores: list) -> None:
        k = self.k
        root = self.root
        accs = {}
        for g in reds:
            inf = self.lay.info(g)
            for j in range(len(g.results)):
                init = self.operand(root, g, inf.n_in + j)
                acc = f"acc{k.generics.index(g)}_{j}"
                root.emit(f"{acc} = tl.broadcast_to({init.code}, (BLOCK_P, 1))  # init of {self.op_label(g)}#{j}")
                accs[(g, j)] = acc
        lines: list[str] = []
        # own names for the reduction indices: scalars here, [1, BLOCK_R] lanes in chunk loops
        names = dict(k.names)
        names.update({d: k.names[d] + "_s" for d in k.R})
        sc = _Scope("serial", lines, "        ", root, names=names)
        self.decompose(sc, "ridx", k.order_r)
        for g in reds:
            inf = self.lay.info(g)
            sc.emit(f"# {self.op_label(g)}: reduction evaluated in order (body has no known combiner) at {_short_loc(g)}")
            env = self.bind_args(sc, g, skip_outs=True)
            blk = pat.body(g)
            for j in range(len(g.results)):
                env[blk.arguments[inf.n_in + j]] = Val(accs[(g, j)], B.elem_name(g.results[j].type), frozenset({"p"}))
            ys = [self.body_value(sc, g, env, y) for y in pat.yield_op(g).operands]
            news = []
            for j, y in enumerate(ys):
                nv = self.fresh("next")
                sc.emit(f"{nv} = {y.code}")
                news.append(nv)
            for j, nv in enumerate(news):
                sc.emit(f"{accs[(g, j)]} = tl.broadcast_to({nv}, (BLOCK_P, 1))")
        for idx, g, r in stores:
            self.store(sc, idx, g, r)
        self.flush()
        self.out.append(f"    for ridx in range(0, {k.nr}):  # serial reduction")
        self.out.extend(lines)
        for (g, j), acc in accs.items():
            root.memo[(g, j)] = Val(acc, B.elem_name(g.results[j].type), frozenset({"p"}))

    def combine_fn(self, comb: str, g, ty: str) -> str:
        fname = "_combine_" + comb.split(".")[1] + ("_bf16" if ty == "bf16" else "")
        if fname not in self.combine_fns:
            if comb in ("arith.maxui", "arith.minui"):
                raise CodegenError(g, "unsigned min/max reductions")
            self.combine_fns[fname] = f"@jit\ndef {fname}(a, b):\n    {B.combine_expression(comb, ty)}\n"
        return fname

    def finish(self, lines: list[str], blocks: list[str]) -> str:
        k = self.k
        fn = _ident(k.name)
        params = self.signature() + [f"{b}: tl.constexpr" for b in blocks]
        head = [f'"""Generated by uniorch from kernel @{k.name} ({k.kind}). Do not edit."""',
                "import triton.language as tl", "", ""]
        text_body = "\n".join(lines)
        helpers = B.helpers_used(text_body)
        parts = head
        for h in helpers:
            parts.append(B.HELPERS[h])
            parts.append("")
        for src in self.combine_fns.values():
            parts.append(src)
            parts.append("")
        sig = ", ".join(params)
        parts.append("@jit")
        parts.append(f"def {fn}({sig}):")
        parts.extend(lines)
        return "\n".join(parts) + "\n"


_FOLD_CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
             "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


def _fold(op, vals: list, rty: str):
    """Compile-time value of an op on constants (the common integer/compare cases), else None."""
    name = op.name
    try:
        if name in ("arith.addi", "arith.subi", "arith.muli"):
            a, b = int(vals[0]), int(vals[1])
            r = a + b if name == "arith.addi" else a - b if name == "arith.subi" else a * b
            bits = B.BITS.get(rty, 64)
            r &= (1 << bits) - 1
            return r - (1 << bits) if r >= 1 << (bits - 1) and rty != "i1" else r
        if name in ("arith.index_cast", "arith.extsi") and rty in ("index", "i64", "i32"):
            return int(vals[0])
        if name == "arith.select":
            return vals[1] if vals[0] else vals[2]
        if name == "arith.cmpi":
            pred = ir.IntegerAttr(op.attributes["predicate"]).value
            key = {0: "eq", 1: "ne", 2: "lt", 3: "le", 4: "gt", 5: "ge"}.get(pred)
            return None if key is None else int(_FOLD_CMP[key](int(vals[0]), int(vals[1])))
        if name == "arith.cmpf":
            pred = ir.IntegerAttr(op.attributes["predicate"]).value
            key = {1: "eq", 2: "gt", 3: "ge", 4: "lt", 5: "le"}.get(pred)
            if key is None or any(v != v for v in vals):
                return None
            return int(_FOLD_CMP[key](float(vals[0]), float(vals[1])))
    except (TypeError, ValueError):
        return None
    return None


def _affine_code(e, dims: list[str], syms: list[str]) -> str:
    """Triton text of an affine expression over index values (floor semantics for div/mod)."""
    if isinstance(e, ir.AffineDimExpr):
        return dims[e.position]
    if isinstance(e, ir.AffineSymbolExpr):
        return syms[e.position]
    if isinstance(e, ir.AffineConstantExpr):
        return f"tl.full([], {e.value}, tl.int64)"
    a, b = _affine_code(e.lhs, dims, syms), _affine_code(e.rhs, dims, syms)
    if isinstance(e, ir.AffineAddExpr):
        return f"({a} + {b})"
    if isinstance(e, ir.AffineMulExpr):
        return f"({a} * {b})"
    if isinstance(e, ir.AffineFloorDivExpr):
        return f"_floordiv({a}, {b})"
    if isinstance(e, ir.AffineModExpr):
        return f"_floormod({a}, {b})"
    if isinstance(e, ir.AffineCeilDivExpr):
        return f"(-_floordiv(-{a}, {b}))"
    raise CodegenError(None, f"affine expression {e}")


def _known_type(t) -> bool:
    try:
        B.type_name(t)
        return True
    except KeyError:
        return False


# =================================================================================================
# copy kernels
# =================================================================================================
def _static(op, name: str) -> list[int]:
    vals = list(ir.DenseI64ArrayAttr(op.attributes[name]))
    if any(v == -(2 ** 63) for v in vals):  # ShapedType::kDynamic
        raise CodegenError(op, f"dynamic {name}")
    return vals


def _copy_space(k: Kernel) -> tuple[str, list[int]]:
    """(mode, iteration shape) of a copy kernel."""
    op = k.copy_ops[0]
    if op.name == "tensor.insert_slice" and _inplace_input(k) is not None:
        return "slice", _static(op, "static_sizes")
    if op.name == "tensor.insert_slice" and _dest_is_empty(op):
        return "slice", _static(op, "static_sizes")
    return "full", _shape(op.results[0].type)


def _copy_numel(k: Kernel) -> int:
    return _numel(_copy_space(k)[1])


def _dest_is_empty(op) -> bool:
    dest = op.operands[1]
    return not isinstance(dest.owner, ir.Block) and pat.op_of(dest.owner).name == "tensor.empty"


def _inplace_input(k: Kernel) -> int | None:
    attrs = k.func.attributes
    if "uniorch.inplace" not in attrs:
        return None
    pairs = [ir.IntegerAttr(a).value for a in ir.ArrayAttr(attrs["uniorch.inplace"])]
    return pairs[0] if pairs and pairs[0] >= 0 else None


def _mark_inplace(k: Kernel) -> None:
    op = k.copy_ops[0]
    if op.name != "tensor.insert_slice" or "uniorch.inplace" in k.func.attributes:
        return
    dest = op.operands[1]
    if isinstance(dest.owner, ir.Block) and dest.owner == k.block and len(k.ret.operands) == 1 \
            and k.ret.operands[0] == op.results[0]:
        idx = k.args.index(dest)
        with k.func.context:
            k.func.attributes["uniorch.inplace"] = ir.ArrayAttr.get(
                [ir.IntegerAttr.get(ir.IntegerType.get_signless(64), idx)])


def _params(k: Kernel) -> list[str]:
    params = []
    for prefix, vals in (("in", k.args), ("out", list(k.ret.operands))):
        for i, v in enumerate(vals):
            params.append(f"{prefix}{i}_ptr")
            params.extend(f"{prefix}{i}_s{d}" for d in range(len(_shape(v.type))))
    return params


def _emit_copy(k: Kernel, sched: dict) -> tuple[str, list[str]]:
    op = k.copy_ops[0]
    if len(k.ret.operands) != 1 or k.ret.operands[0] != op.results[0]:
        raise CodegenError(op, "a copy kernel returns its op's result")
    arg_index = {a: i for i, a in enumerate(k.args)}
    mode, space = _copy_space(k)
    n = _numel(space)
    idx64 = max([n] + [_numel(_shape(a.type)) for a in k.args] + [_numel(_shape(op.results[0].type))]) >= 2 ** 31
    L = []
    emit = L.append
    ind = "    "
    emit(f"{ind}# {op.name} at {_short_loc(op)}")
    for i, a in enumerate(k.args):
        emit(f"{ind}# in{i}: {a.get_name()} : {a.type}")
    emit(f"{ind}pid = {'tl.program_id(0).to(tl.int64)' if idx64 else 'tl.program_id(0)'}")
    emit(f"{ind}offs = pid * BLOCK + tl.arange(0, BLOCK)")
    emit(f"{ind}mask = offs < {n}")
    names = [f"i{j}" for j in range(len(space))]
    stride = 1
    strides = []
    for s in reversed(space):
        strides.append(stride)
        stride *= s
    strides.reverse()
    for j, (nm, s, st) in enumerate(zip(names, space, strides)):
        text = "offs" if st == 1 else f"offs // {st}"
        if j > 0:
            text = f"({text}) % {s}"
        emit(f"{ind}{nm} = {text}")
    out_shape = _shape(op.results[0].type)

    def arg_of(v):
        if not isinstance(v.owner, ir.Block) or v.owner != k.block:
            raise CodegenError(op, "copy operands must be kernel inputs")
        return arg_index[v]

    def addr(prefix: str, idxs: list[str], shape: list[int]) -> str:
        terms = [f"({x}) * {prefix}_s{j}" for j, (x, s) in enumerate(zip(idxs, shape)) if s != 1]
        return f"{prefix}_ptr" + "".join(" + " + t for t in terms) + (" + offs * 0" if not terms else "")

    if op.name == "tensor.pad":
        src = op.operands[0]
        if len(op.operands) != 1:
            raise CodegenError(op, "dynamic padding")
        low = _static(op, "static_low")
        sshape = _shape(src.type)
        yv = [o.operation for o in op.regions[0].blocks[0].operations][-1].operands[0]
        owner = yv.owner
        if isinstance(owner, ir.Block) or pat.op_of(owner).name != "arith.constant":
            raise CodegenError(op, "padding value is not a constant")
        owner = pat.op_of(owner)
        ty = B.elem_name(owner.results[0].type)
        attr = owner.attributes["value"]
        value = ir.FloatAttr(attr).value if ty in B.FLOATS else ir.IntegerAttr(attr).value
        a = arg_of(src)
        sidx, conds = [], []
        for j, (nm, lo, s) in enumerate(zip(names, low, sshape)):
            e = f"{nm} - {lo}" if lo else nm
            sidx.append(e)
            if lo or s != out_shape[j]:
                conds.append(f"({e} >= 0) & ({e} < {s})")
        inside = " & ".join(conds) or "mask"
        emit(f"{ind}inside = {inside}")
        emit(f"{ind}v = tl.load({addr(f'in{a}', sidx, sshape)}, mask=mask & inside, other=0)")
        emit(f"{ind}v = tl.where(inside, v, {B.constant_expr(value, ty)})")
        emit(f"{ind}tl.store({addr('out0', names, out_shape)}, v, mask=mask)")
    elif op.name == "tensor.concat":
        dim = ir.IntegerAttr(op.attributes["dim"]).value
        start = 0
        first = True
        for v in op.operands:
            a = arg_of(v)
            shp = _shape(v.type)
            end = start + shp[dim]
            sidx = list(names)
            sidx[dim] = f"{names[dim]} - {start}" if start else names[dim]
            emit(f"{ind}piece = ({names[dim]} >= {start}) & ({names[dim]} < {end})  # in{a}")
            load = f"tl.load({addr(f'in{a}', sidx, shp)}, mask=mask & piece, other=0)"
            emit(f"{ind}v = {load}" if first else f"{ind}v = tl.where(piece, {load}, v)")
            first = False
            start = end
        emit(f"{ind}tl.store({addr('out0', names, out_shape)}, v, mask=mask)")
    else:  # insert_slice
        if len(op.operands) != 2:
            raise CodegenError(op, "dynamic offsets/sizes/strides")
        src, dest = op.operands[0], op.operands[1]
        offsets, sizes, steps = _static(op, "static_offsets"), _static(op, "static_sizes"), _static(op, "static_strides")
        sshape = _shape(src.type)
        # source dim of each destination dim (a rank-reducing insert drops unit dims of `sizes`)
        src_dim: list[int | None] = []
        q = 0
        for sz in sizes:
            if q < len(sshape) and sshape[q] == sz and (len(sshape) == len(sizes) or sz != 1):
                src_dim.append(q)
                q += 1
            elif sz == 1:
                src_dim.append(None)
            else:
                raise CodegenError(op, "unsupported rank-reducing insert_slice")
        if q != len(sshape):
            raise CodegenError(op, "unsupported rank-reducing insert_slice")
        a = arg_of(src)

        def src_addr(rel: list[str]) -> str:
            terms = [f"({rel[j]}) * in{a}_s{sd}" for j, sd in enumerate(src_dim) if sd is not None and sshape[sd] != 1]
            return f"in{a}_ptr" + "".join(" + " + t for t in terms) + (" + offs * 0" if not terms else "")

        if mode == "slice":  # iterate the slice, write into the destination buffer
            didx = [(f"{nm} * {st}" if st != 1 else nm) + (f" + {off}" if off else "")
                    for nm, off, st in zip(names, offsets, steps)]
            emit(f"{ind}v = tl.load({src_addr(names)}, mask=mask, other=0)")
            emit(f"{ind}tl.store({addr('out0', didx, out_shape)}, v, mask=mask)  # into the destination's slice")
        else:  # iterate the destination: slice elements from the source, the rest copied
            d = arg_of(dest)
            conds, rel = [], []
            for nm, off, sz, st in zip(names, offsets, sizes, steps):
                r = f"({nm} - {off})" if off else nm
                c = f"({r} >= 0) & ({r} < {(sz - 1) * st + 1})"
                if st != 1:
                    c += f" & ({r} % {st} == 0)"
                    r = f"({r} // {st})"
                conds.append(c)
                rel.append(r)
            emit(f"{ind}inside = {' & '.join(conds) or 'mask'}")
            emit(f"{ind}v = tl.load({src_addr(rel)}, mask=mask & inside, other=0)")
            emit(f"{ind}old = tl.load({addr(f'in{d}', names, _shape(dest.type))}, mask=mask & (~inside), other=0)")
            emit(f"{ind}tl.store({addr('out0', names, out_shape)}, tl.where(inside, v, old), mask=mask)")
    return "\n".join(L), ["BLOCK"]


# =================================================================================================
# entry point
# =================================================================================================
def generate_generic(kernel_func, target: str, schedule: dict | None = None) -> KernelSource:
    """Triton source for one pointwise / reduction / copy kernel function.

    `schedule` overrides the kernel's `uniorch.schedule` (else `choose_schedule`)."""
    k = Kernel(kernel_func)
    sched = schedule or _sched_from_attr(k.func) or choose_schedule(k.func, target)
    try:
        ptypes = [B.pointer_type(a.type) for a in k.args] + [B.pointer_type(r.type) for r in k.ret.operands]
    except KeyError as err:
        raise CodegenError(k.func, f"unsupported element type {err}") from None
    fn = _ident(k.name)
    if k.kind == "copy":
        n = _copy_numel(k)
        block = int(sched.get("block_p", 1024))
        text, _ = _emit_copy(k, sched)
        params = _params(k) + ["BLOCK: tl.constexpr"]
        source = "\n".join([f'"""Generated by uniorch from kernel @{k.name} (copy). Do not edit."""',
                            "import triton.language as tl", "", "", "@jit", f"def {fn}({', '.join(params)}):", text]) + "\n"
        grid = (_cdiv(n, block),)
        constexprs = {"BLOCK": block}
    else:
        em = _Emitter(k, sched, target)
        source = em.run()
        if k.reductive:
            block_p, block_r = int(sched["block_p"]), int(sched["block_r"])
            if not any(c is not None for c in k.combiners.values()):
                block_r = max(block_r, 1)
            constexprs = {"BLOCK_P": block_p, "BLOCK_R": block_r}
            grid = (_cdiv(k.np_, block_p),)
        else:
            block = int(sched["block_p"])
            constexprs = {"BLOCK": block}
            grid = (_cdiv(k.np_, block),)
    return KernelSource(
        name=k.name, fn_name=fn, source=source,
        input_ranks=[len(_shape(a.type)) for a in k.args],
        output_ranks=[len(_shape(r.type)) for r in k.ret.operands],
        grid=grid, constexprs=constexprs,
        num_warps=int(sched.get("num_warps", 4)), num_stages=int(sched.get("num_stages", 1)),
        pointer_types=ptypes,
    )
