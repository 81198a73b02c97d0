"""Pointwise/reduction kernels, emission: the Triton source of a kernel's loop nest, phases of
reductions, and each op's scalar body (through body.py)."""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch_mlir import ir

from uniorch.ir import dims
from uniorch.ir.dims import code as size_code

from . import body as B
from . import domain as D
from . import patterns as pat
from . import welford
from .generic_kernel import Kernel, WIDE_COMBINERS, _ident, _shape, _short_loc, _widen
from .generic_copy import _known_type, _params

from .source import CodegenError


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
        self.idx64 = k.max_numel() >= 2 ** 31 or k.symbolic  # symbolic sizes: any size, so 64-bit
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
            raise CodegenError(self.k.func, f"scalar operand {pat.value_name(v)} is not a constant")
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
    def load(self, scope: _Scope, arg: int, exprs: list[D.Aff], ty: str, why: str, pad=None) -> Val:
        """Argument `arg` at `exprs`. `pad` = (low, fill): the argument is the source of a constant
        `tensor.pad` read at padded positions `exprs`; lanes outside the source load `fill`."""
        shape = _shape(self.k.args[arg])
        if pad is not None:
            low, fill = pad
            exprs = [e + D.Aff.constant(-lo) for e, lo in zip(exprs, low)]
        dims = set()
        for e, s in zip(exprs, shape):
            if s != 1 or pad is not None:
                dims |= e.dims()
        lanes = self.lanes_of(dims)
        if "r" not in lanes and scope.kind != "row":
            return self.load(scope.root, arg, exprs, ty, why, None if pad is None else ([0] * len(shape), pad[1]))
        key = (arg, tuple(e for e, s in zip(exprs, shape) if s != 1 or pad is not None),
               None if pad is None else pad[1].code)
        if key in scope.loads:
            return scope.loads[key]
        # under a pad, a size-1 dim's index still varies (0 where the lane reads the source): kept
        # in the address so it is a block wherever the mask on it is
        terms = [f"({self.code(e, scope)}) * in{arg}_s{j}" for j, (e, s) in enumerate(zip(exprs, shape))
                 if (s != 1 or pad is not None) and not (e.is_const() and e.const == 0)]
        addr = f"in{arg}_ptr" + "".join(" + " + t for t in terms)
        conds = [] if pad is None else self.inside(scope, exprs, shape)
        if conds is None:  # every lane reads the pad
            return pad[1]
        mask = " & ".join(filter(None, [self.mask_for(scope, lanes)] + conds))
        name = self.fresh(f"in{arg}_")
        if mask:
            # masked lanes: the pad value, or one every math op takes
            other = pad[1].code if conds else "1.0" if ty in B.FLOATS else "0"
            scope.emit(f"{name} = tl.load({addr}, mask={mask}, other={other})  # {why}")
        else:
            scope.emit(f"{name} = tl.load({addr})  # {why}")
        val = Val(name, ty, lanes)
        scope.loads[key] = val
        return val

    def inside(self, scope: _Scope, exprs: list[D.Aff], shape: list[int]) -> list[str] | None:
        """Conditions for `exprs` to lie inside `shape` (only those the domain's bounds leave
        open), or None when no position of the domain does."""
        conds = []
        for e, size in zip(exprs, shape):
            lo, hi = e.bounds(self.lay.domain.sizes)
            # symbolic bounds (uniorch/ir/dims.py): None only when no size allows a position
            # inside, a condition whenever some size needs it
            if dims.must_lt(hi, 0) or not dims.may_lt(lo, size):
                return None
            text = self.code(e, scope)
            if dims.may_lt(lo, 0):
                conds.append(f"({text} >= 0)")
            if not dims.must_lt(hi, size):
                conds.append(f"({text} < {size_code(size)})")
        return conds

    def concatenated(self, scope: _Scope, g: ir.Operation, i: int, cat: ir.Operation, ty: str) -> Val:
        """Operand `i` of `g` is a concatenation of kernel arguments: each piece loaded where the
        index falls in it (masked loads), one picked per lane; the concatenation is never written
        (rotary embeddings' rotate_half)."""
        dim = ir.IntegerAttr(cat.attributes["dim"]).value
        exprs = self.lay.operand_exprs(g, i)
        zero = Val(B.constant_expr(0, ty), ty, frozenset(), 0)
        picks, off = [], 0
        for v in cat.operands:
            n = _shape(v)[dim]
            low = [0] * len(exprs)
            low[dim] = off
            if n and self.inside(scope, [e + D.Aff.constant(-lo) for e, lo in zip(exprs, low)], _shape(v)) is not None:
                if not isinstance(v.owner, ir.Block):
                    raise CodegenError(cat, "tensor.concat inside a kernel must join kernel arguments")
                val = self.load(scope, self.arg_index[v], exprs, ty,
                                f"{pat.value_name(v)} at [{off}, {off + n}) of {self.op_label(g)}", (low, zero))
                picks.append((off, off + n, val))
            off += n
        out = picks[-1][2]
        where = self.code(exprs[dim], scope)
        for lo, hi, val in reversed(picks[:-1]):
            name = self.fresh("cat")
            lanes = val.lanes | out.lanes | self.lanes_of(exprs[dim].dims())
            target = scope if "r" in lanes or scope.kind == "row" else scope.root
            target.emit(f"{name} = tl.where({where} < {size_code(hi)}, {val.code}, {out.code})  # concat dim {dim}")
            out = Val(name, ty, lanes)
        return out

    def padded(self, scope: _Scope, g: ir.Operation, i: int, pad: ir.Operation, ty: str) -> Val:
        """Operand `i` of `g` is a constant pad of a kernel argument: a masked load of the argument,
        so the padded tensor is never written (pooling windows over a padded input)."""
        from uniorch.passes.pad_views import pad_value

        src, padv = pad.operands[0], pad_value(pad)
        if padv is None or len(pad.operands) != 1 or not isinstance(src.owner, ir.Block):
            raise CodegenError(pad, "tensor.pad inside a kernel must pad a kernel argument with one constant")
        low = list(ir.DenseI64ArrayAttr(pad.attributes["static_low"]))
        exprs = self.lay.operand_exprs(g, i)
        return self.load(scope, self.arg_index[src], exprs, ty,
                         f"{pat.value_name(src)} padded, of {self.op_label(g)}", (low, self.scalar(padv)))

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
                exprs = D.realign(self.lay.operand_exprs(g, i), _shape(v), _shape(base))
                if isinstance(base.owner, ir.Block):
                    return self.load(scope, self.arg_index[base], exprs, ty, f"{pat.value_name(base)} (viewed) of {self.op_label(g)}")
                v = base
        if isinstance(v.owner, ir.Block):
            if v.owner != self.k.block:
                raise CodegenError(g, "operand defined in an enclosing region")
            exprs = self.lay.operand_exprs(g, i)
            return self.load(scope, self.arg_index[v], exprs, ty, f"{pat.value_name(v)} of {self.op_label(g)}")
        owner = pat.op_of(v.owner)
        if owner.name == "arith.constant":
            return self.constant(owner)
        if owner.name == "tensor.pad":
            return self.padded(scope, g, i, owner, ty)
        if owner.name == "tensor.concat":
            return self.concatenated(scope, g, i, owner, ty)
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
            if owner == self.k.block and self.k.symbolic and not isinstance(v.type, ir.ShapedType):
                try:  # a size (a mean's divisor): its expression over the size parameters
                    size = dims.index_value(v)
                except dims.UnknownSize as err:
                    raise CodegenError(g, f"a scalar kernel argument: {err}") from None
                ty = B.elem_name(v.type) if not isinstance(v.type, ir.IndexType) else "index"
                val = Val(B.size_scalar(size, ty), ty, frozenset())
                env[v] = val
                return val
            if owner == self.k.block:
                raise CodegenError(g, "a kernel argument used as a scalar in a body")
            raise CodegenError(g, "block argument not bound")
        op = pat.op_of(owner)
        if op.name == "arith.constant":
            val = self.constant(op)
            env[v] = val
            return val
        if op.name == "tensor.dim" and self.k.symbolic:
            # a gather's wrap of negative indices adds the gathered dim's size, symbolic here
            try:
                size = dims.index_value(v)
            except dims.UnknownSize as err:
                raise CodegenError(g, f"a tensor's size in a body: {err}") from None
            val = Val(f"tl.full([], {size_code(size)}, tl.int64)", "index", frozenset())
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
            expr = B.affine_code(amap.results[0], names[: amap.n_dims], names[amap.n_dims:])
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
        shape = _shape(src)
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
            conds.append(f"({iv.code} >= 0) & ({iv.code} < {size_code(s)})")
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
            text = flat if strides[d] == 1 else f"{flat} // {size_code(strides[d])}"
            if pos > 0:
                text = f"({text}) % {size_code(sizes[d])}"
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
            root.emit(f"# in{i}: {pat.value_name(a)} : {a.type}")
        for i, v in enumerate(k.ret.operands):
            root.emit(f"# out{i}: {v.type}")
        pid = "tl.program_id(0).to(tl.int64)" if self.idx64 else "tl.program_id(0)"
        root.emit(f"pid = {pid}")
        if not k.reductive:
            root.emit(f"rows = pid * BLOCK + tl.arange(0, BLOCK)")
            root.emit(f"row_mask = rows < {size_code(k.np_)}")
            root.emit("row_zero = rows * 0")
            self.decompose(root, "rows", k.order_p)
            for idx, g, r in k.stores:
                self.store(root, idx, g, r)
            return self.finish(body, ["BLOCK"])
        root.emit(f"rows = pid * BLOCK_P + tl.arange(0, BLOCK_P)[:, None]")
        root.emit(f"row_mask = rows < {size_code(k.np_)}")
        root.emit("row_zero = rows * 0")
        self.decompose(root, "rows", k.order_p)
        # a symbolic row length (a sum over the batch, sequential combiners) is swept in a loop
        self.persistent = not (self.sched.get("looped") or not isinstance(k.nr, int) or self.sched["block_r"] < k.nr)
        # a looped row's sums of deviations ride on the sweep that sums it (codegen/welford.py)
        self.centred = {} if self.persistent else {c.sum_op: c for c in welford.find(k)}
        riding = {r for c in self.centred.values() for r, _ in c.sums}
        self.out = []  # emitted (flushed) lines
        self.persistent_scope = None
        done_stores: set = set()
        full_stores = [(i, g, r) for i, g, r in k.stores if k.level[g] == "full"]
        for phase in range(k.n_phases + 1):
            reds = [g for g in k.generics if k.level[g] == "reduce" and k.phase[g] == phase and g not in riding]
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
                sc.emit(f"col_mask = cols < {size_code(k.nr)}")
                sc.emit("full_zero = row_zero + cols * 0")
                self.decompose(sc, "cols", k.order_r)
                self.persistent_scope = sc
            return self.persistent_scope, None
        lines: list[str] = []
        sc = _Scope("chunk", lines, "        ", self.root)
        sc.emit("cols = r_start + tl.arange(0, BLOCK_R)[None, :]" + (".to(tl.int64)" if self.idx64 else ""))
        sc.emit(f"col_mask = cols < {size_code(k.nr)}")
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
                # a float sum reduces with Triton's own combiner, `a + b` too, which the interpreter
                # sums with numpy instead of calling ours per element pair
                red = B.SUM_COMBINE if comb == "arith.addf" and acc_ty in ("f32", "f64") else fn
                sc.emit(f"{part} = tl.reduce(tl.where(row_mask & col_mask, {x}, {ident}), 1, {red}, keep_dims=True)")
                if self.persistent:
                    sc.emit(f"{acc} = {fn}({start}, {part})")
                else:
                    sc.emit(f"{acc} = {fn}({acc}, {part})")
                if g in self.centred:
                    self.welford_chunk(sc, g, x, part)
        for idx, g, r in stores:
            self.store(sc, idx, g, r)
        if lines is not None:
            self.flush()
            self.out.append(f"    for r_start in range(0, {size_code(k.nr)}, BLOCK_R):  # phase {phase}")
            self.out.extend(lines)
        for (g, j), (acc, _start, _comb, acc_ty) in accs.items():
            ty = B.elem_name(g.results[j].type)
            if acc_ty != ty:  # the single rounding of a widened accumulator
                root.emit(f"{acc}_out = {acc}.to({B.tl_type(ty)})")
                acc = f"{acc}_out"
            root.memo[(g, j)] = Val(acc, ty, frozenset({"p"}))
        for g in tree:
            if g in self.centred:
                self.welford_results(self.centred[g])

    def welford_chunk(self, sc: _Scope, g, x: str, part: str) -> None:
        """Merges this chunk's count, mean and squared deviations into the row's (n, mean, M2)."""
        w = f"w{self.k.generics.index(g)}"
        self.root.emit(f"{w}_n = tl.full((1, 1), 0.0, tl.float32)  # Welford: count, mean, M2 of the row")
        self.root.emit(f"{w}_mean = tl.full((BLOCK_P, 1), 0.0, tl.float32)")
        self.root.emit(f"{w}_m2 = tl.full((BLOCK_P, 1), 0.0, tl.float32)")
        sc.emit(f"{w}_cn = tl.reduce(col_mask.to(tl.float32), 1, {B.SUM_COMBINE}, keep_dims=True)")
        # the chunk's own statistics by the corrected two-pass algorithm, in registers: a plain
        # sum's mean is off by ~log2(BLOCK_R) ulps of a row far from zero
        sc.emit(f"{w}_c0 = {part} / {w}_cn")
        sc.emit(f"{w}_cd = tl.where(row_mask & col_mask, {x} - {w}_c0, 0.0)")
        sc.emit(f"{w}_cs = tl.reduce({w}_cd, 1, {B.SUM_COMBINE}, keep_dims=True)")
        sc.emit(f"{w}_cmean = {w}_c0 + {w}_cs / {w}_cn")
        sc.emit(f"{w}_cm2 = tl.reduce({w}_cd * {w}_cd, 1, {B.SUM_COMBINE}, keep_dims=True) - {w}_cs * {w}_cs / {w}_cn")
        sc.emit(f"{w}_nn = {w}_n + {w}_cn")
        sc.emit(f"{w}_dl = {w}_cmean - {w}_mean")
        sc.emit(f"{w}_mean = {w}_mean + {w}_dl * ({w}_cn / {w}_nn)")
        sc.emit(f"{w}_m2 = {w}_m2 + {w}_cm2 + {w}_dl * {w}_dl * ({w}_n * {w}_cn / {w}_nn)")
        sc.emit(f"{w}_n = {w}_nn")

    def welford_results(self, c) -> None:
        """sum(x - c) and sum((x - c)²) of the row from its Welford state, for the row value c."""
        root, k = self.root, self.k
        w = f"w{k.generics.index(c.sum_op)}"
        cv = self.result(root, *c.c)
        root.emit(f"{w}_dc = {w}_mean - {cv.code}  # deviation sums without another sweep")
        for r, power in c.sums:
            init = self.operand(root, r, self.lay.info(r).n_in)
            name = f"acc{k.generics.index(r)}_0"
            term = f"{_float(k.nr)} * {w}_dc" if power == 1 else f"({w}_m2 + {_float(k.nr)} * {w}_dc * {w}_dc)"
            root.emit(f"{name} = {init.code} + {term}  # {self.op_label(r)}: sum of deviations^{power}")
            root.memo[(r, 0)] = Val(name, "f32", frozenset({"p"}))

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
        self.out.append(f"    for ridx in range(0, {size_code(k.nr)}):  # serial reduction")
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


_FLOAT_FOLD = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


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
        if name in ("arith.truncf", "arith.extf") and rty in _FLOAT_FOLD:
            # a Python float constant captured as f64 then narrowed (LayerNorm's eps): round it
            # here, so an f32 kernel carries no f64 value at all
            return torch.tensor(float(vals[0]), dtype=torch.float64).to(_FLOAT_FOLD[rty]).item()
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


def _float(n) -> str:
    """A size as a float literal (a symbolic one converted at run time)."""
    return f"{n}.0" if isinstance(n, int) else f"({size_code(n)} * 1.0)"
