"""Contraction kernels, emission: the Triton source of one tiled `tl.dot` kernel from its `_Plan`,
with producers evaluated in the operand tiles and the epilogue on the accumulator."""
from __future__ import annotations

from torch_mlir import ir

from uniorch.ir.dims import cdiv as size_cdiv, code as size_code, kernel_symbols, prod as size_prod

from . import body as _body
from .contraction_ir import (
    Lin, Quot, _PTR, _TL, _Val, _as_op, _const_value, _elem, _is_float, _is_shaped, _iterators,
    _lin, _lit, _loc, _maps, _producer, _round, _shape,
)
from .contraction_plan import ROW_STAT, _Plan, _get, _is_empty, _known, _loop_sizes, unit_view_index
from .const_fold import _CASTS, _LITERAL_OK, _fold
from .contraction_gather import _Gathers
from .contraction_reduce import _Reductions, output_env
from .contraction_schedule import _target_kind, row_step
from .contraction_stats import _TileStats
from .contraction_window import WINDOW_PRODUCER, _Windows
from .operand_sums import _OperandSums
from .conv_layout import channels_last_relayout
from .fma_relayout import fma_relayout
from .patterns import dot_precision
from .source import CodegenError, KernelSource, kernel_ident, symbol_dims, tensor_params


def _vendor(target) -> str:
    from uniorch.targets import TargetError, parse_target

    try:
        return parse_target(target or "interpret").vendor
    except TargetError:
        return ""


class _Emitter(_Reductions, _Gathers, _TileStats, _Windows, _OperandSums):
    def __init__(self, plan: _Plan, sched: dict, target: str):
        self.p = plan
        self.s = sched
        self.interpret = _target_kind(target)[0] == "interpret"
        # bf16 dot operands widened to f32 (exact: bf16 products are exact in f32 and the dot
        # accumulates in f32 either way): the interpreter keeps bf16 as raw bits, and the cpu
        # backend's lowering (Ascend's adapter, then upstream MLIR) of a dot whose bf16 operand is
        # a broadcast row gave values ~1e10 (every M=1 bf16 matmul)
        self.widen_bf16 = self.interpret or _vendor(target) == "cpu"
        self.target = target
        self.gpu = not self.interpret and _vendor(target) in ("cuda", "rocm")
        self.b_loads: list = []     # [(input index, index per dim)] loaded into the B tile
        self.a_inputs: set = set()  # inputs loaded into the A tile
        self.a_loads: list = []     # [(input index, index per dim)] loaded into the A tile
        self.dot_dt = None          # the tl.dot operand type
        self.pre: list[str] = []    # before the K loop
        self.loop: list[str] = []   # inside the K loop
        self.post: list[str] = []   # after the K loop
        self.need: set[str] = set()
        self.memo: list = []        # [(value, idx, (ctx, inside), _Val)]
        self.inside: list = []      # bounds of the pads being evaluated (masks for loads under them)
        self.count: dict[str, int] = {}
        self.frames: list[dict] = []   # fused ops being emitted: their header comment, location
        self.last_loc: dict[int, str] = {}
        self.win = None             # window element being evaluated (a pooling epilogue), or None
        self.win_defs: dict[str, str] = {}   # windowed index name -> its definition
        self.tap_names: dict = {}  # a depthwise producer's tap dims (contraction_window.py) -> names
        self.pos = {}
        for c in "bmnk":
            for i, d in enumerate(plan.order[c]):
                self.pos[d] = i
        # a symbolic extent (uniorch/ir/dims.py) may not be a multiple of the tile: masked
        self.step_m, self.step_n = row_step(plan, "m", "BLOCK_M"), row_step(plan, "n", "BLOCK_N")
        self.mask_m = not isinstance(plan.M, int) or plan.M % sched["block_m"] != 0 or self.step_m != "BLOCK_M"
        self.mask_n = not isinstance(plan.N, int) or plan.N % sched["block_n"] != 0 or self.step_n != "BLOCK_N"
        self.mask_k = not isinstance(plan.K, int) or plan.K % sched["block_k"] != 0

    # -- names, lines ---------------------------------------------------------------------------

    def fresh(self, prefix: str) -> str:
        n = self.count.get(prefix, 0)
        self.count[prefix] = n + 1
        return f"{prefix}{n}"

    def block(self, ctx: str, cls) -> list[str]:
        if ctx in ("a", "b"):
            return self.loop if "k" in cls else self.pre
        return self.pre if ctx == "init" else self.post

    def line(self, ctx: str, cls, text: str, prefix: str, loc: str | None = None) -> str:
        name = self.fresh(prefix)
        blk = self.block(ctx, cls)
        frame = self.frames[-1] if self.frames else None
        if frame is not None and id(blk) not in frame["done"]:
            frame["done"].add(id(blk))
            blk.append(frame["header"])
            self.last_loc[id(blk)] = frame["loc"]
        tail = ""
        if loc is not None and "unknown" not in loc and self.last_loc.get(id(blk)) != loc:
            tail = f"  # {loc}"  # the ATen op this line comes from, where it differs
            self.last_loc[id(blk)] = loc
        blk.append(f"{name} = {text}{tail}")
        return name

    def dim_name(self, d: int, ctx: str) -> str:
        if d in self.tap_names:
            return self.tap_names[d]
        c = self.p.cls[d]
        i = self.pos[d]
        if c == "b":
            name = f"bt{i}"
        elif c == "m":
            name = f"m{i}"
        elif c == "n":
            name = f"n{i}"
        elif c == "k":
            if ctx not in ("a", "b"):
                raise CodegenError(self.p.gen, "reduction index used outside the K loop")
            name = f"k{ctx}{i}"
        else:
            raise AssertionError(c)
        self.need.add(name)
        w = self.p.window
        if self.win is not None and d in w.strides:
            # the full-size position of this window element: pooled position * stride + offset
            off = w.offsets()[self.win][d]
            wname = f"{name}_w{self.win}"
            self.win_defs[wname] = f"{name} * {w.strides[d]}" + (f" + {off}" if off else "")
            return wname
        return name

    def lin_text(self, lin, ctx: str) -> str:
        if isinstance(lin, Quot):
            return f"({self.lin_text(lin.lin, ctx)}) // {lin.k}"
        parts = []
        for d, c in lin.terms:
            n = self.dim_name(d, ctx)
            parts.append(n if c == 1 else f"{n} * {c}")
        if lin.const or not parts:
            parts.append(str(lin.const))
        return " + ".join(parts)

    def lin_cls(self, lin: Lin) -> set:
        return {self.p.cls.get(d, "k") for d in lin.dims()} & {"m", "n", "k"}  # tap dims: K

    def mask(self, cls, ctx: str) -> str | None:
        parts = []
        if "m" in cls and self.mask_m:
            parts.append("mask_m")
        if "k" in cls and self.mask_k:
            parts.append(f"mask_k{ctx}")
        if "n" in cls and self.mask_n:
            parts.append("mask_n")
        self.need.update(parts)
        return " & ".join(parts) if parts else None

    # -- values ---------------------------------------------------------------------------------

    def value(self, v, idx: tuple, ctx: str) -> _Val:
        """Triton value of tensor `v` at index `idx` (a Lin per dim of v) in context `ctx`."""
        if self.win is not None and not any(d in self.p.window.strides for lin in idx for d in lin.dims()):
            # not along the window: the same value for every window element, evaluated once
            w, self.win = self.win, None
            try:
                return self.value(v, idx, ctx)
            finally:
                self.win = w
        key = (ctx, tuple(self.inside), self.win)  # loads under a pad are masked: not the same value
        for mv, midx, mkey, val in self.memo:
            if mkey == key and midx == idx and mv == v:
                return val
        val = self._value(v, idx, ctx)
        self.memo.append((v, idx, key, val))
        return val

    def _value(self, v, idx, ctx) -> _Val:
        p = self.p
        owner = v.owner
        if isinstance(owner, ir.Block):
            for i, a in enumerate(p.args):
                if a == v:
                    return self.load(i, idx, ctx)
            raise CodegenError(p.func, "value of an unknown block")
        op = _as_op(owner)
        sib = next((k for k, c in enumerate(p.siblings) if c["gen"] == op), None)
        if op == p.gen or sib is not None:
            if ctx != "e" or idx != p.acc_layout:
                raise CodegenError(op, "the contraction result is read at a position other than the one computed")
            ty = _elem(v)
            acc = f"acc_s{sib}" if sib is not None else "acc" if p.window is None else f"acc_w{self.win}"
            text = acc if ty == self.acc_ty else f"{acc}.to({_TL[ty]})"
            name = self.line("e", {"m", "n"}, text, "c")
            return _Val(name, ty, frozenset({"m", "n"}))
        if p.window is not None and op == p.window.op:
            return self.pooled(op, idx, ctx)
        if op.name == "linalg.generic":
            return self.generic(op, ir.OpResult(v).result_number, idx, ctx)
        if op.name == "tensor.pad":
            return self.pad(op, idx, ctx)
        if op.name == "tensor.concat":
            return self.concat(op, idx, ctx)
        if op.name == "tensor.insert_slice":
            return self.inserted(op, idx, ctx)
        if op.name in ("tensor.expand_shape", "tensor.collapse_shape") and not _is_empty(v):
            sub = unit_view_index(idx, _shape(v), _shape(op.operands[0]))
            if sub is not None:  # size-1 dims added or dropped: the same element
                return self.value(op.operands[0], sub, ctx)
            src = op.operands[0]
            if _known(p.layouts, v) and _known(p.layouts, src) and idx == _get(p.layouts, v):
                # a merge of the output's dims (GQA's heads) read where the epilogue laid it out
                return self.value(src, _get(p.layouts, src), ctx)
        if _is_empty(v):
            raise CodegenError(op, "reads an uninitialised tensor (tensor.empty)")
        raise CodegenError(op, "op not supported inside a contraction kernel")

    def pad(self, op, idx: tuple, ctx: str) -> _Val:
        """A constant `tensor.pad` of a kernel argument at `idx`: the unpadded tensor loaded at
        `idx - low` wherever that is inside it, the pad value elsewhere (a masked load), so a
        convolution reads its input once and no padded copy is ever written."""
        from uniorch.passes.pad_views import pad_value

        src, padv = op.operands[0], pad_value(op)
        if padv is None or len(op.operands) != 1:
            raise CodegenError(op, "tensor.pad with a non-constant value or dynamic amounts")
        fill = self.scalar(padv, op)
        low = list(ir.DenseI64ArrayAttr(op.attributes["static_low"]))
        high = list(ir.DenseI64ArrayAttr(op.attributes["static_high"]))
        shifted = tuple(lin + Lin.cst(-lo) for lin, lo in zip(idx, low))
        inside = []
        for lin, lo, hi, size in zip(shifted, low, high, _shape(src)):
            if lin.is_const():
                if not 0 <= lin.const < size:
                    return fill
                continue
            if lo:
                inside.append(f"({self.lin_text(lin, ctx)} >= 0)")
            if hi:
                inside.append(f"({self.lin_text(lin, ctx)} < {size_code(size)})")
        arg = next((i for i, a in enumerate(self.p.args) if a == src), None)
        if arg is not None:
            return self.load(arg, shifted, ctx, inside, fill)
        # a prologue computed in the kernel (BatchNorm + ReLU before the conv): every load under it
        # is masked to the unpadded region, and the pad value replaces what lies outside
        bounded = [lin for lin, lo, hi in zip(shifted, low, high) if (lo or hi) and not lin.is_const()]
        val = self.bounded_value(src, shifted, ctx, inside, bounded)
        if not inside:
            return val
        cls = set(val.cls).union(*[self.lin_cls(lin) for lin in shifted])
        cond = " & ".join(inside)
        text = f"tl.where({cond}, {val.text}, {fill.text})"
        return _Val(self.line(ctx, cls, text, f"{ctx}_pad"), val.ty, frozenset(cls))

    def concat(self, op, idx: tuple, ctx: str) -> _Val:
        """A `tensor.concat` at `idx`: each piece loaded at its own offset where `idx` falls in it
        (masked loads), one picked per lane, so a convolution over `cat(x, conv(x))` (DenseNet,
        a UNet's skip connection) reads its pieces and the concatenation is never written."""
        dim = ir.IntegerAttr(op.attributes["dim"]).value
        lin = idx[dim]
        pieces, off = [], 0
        for v in op.operands:
            n = _shape(v)[dim]
            if n:  # an empty piece holds no lane
                pieces.append((v, off, n))
            off += n
        if lin.is_const():
            v, o, _ = next(pc for pc in pieces if pc[1] <= lin.const < pc[1] + pc[2])
            return self.value(v, idx[:dim] + (Lin.cst(lin.const - o),) + idx[dim + 1:], ctx)
        where = self.lin_text(lin, ctx)
        vals = []
        for j, (v, o, n) in enumerate(pieces):
            shifted = idx[:dim] + (lin + Lin.cst(-o),) + idx[dim + 1:]
            conds = ([f"({where} >= {o})"] if j else []) + ([f"({where} < {o + n})"] if j < len(pieces) - 1 else [])
            arg = next((i for i, a in enumerate(self.p.args) if a == v), None)
            if arg is not None:
                vals.append(self.load(arg, shifted, ctx, conds))
                continue
            # a piece computed in the kernel: its loads are masked to the piece's lanes
            vals.append(self.bounded_value(v, shifted, ctx, conds, [shifted[dim]]))
        cls = set(self.lin_cls(lin)).union(*[val.cls for val in vals])
        out = vals[-1]
        for (_, o, n), val in zip(reversed(pieces[:-1]), reversed(vals[:-1])):
            text = f"tl.where({where} < {o + n}, {val.text}, {out.text})"
            out = _Val(self.line(ctx, cls, text, f"{ctx}_cat"), val.ty, frozenset(cls))
        return out

    def inserted(self, op, idx: tuple, ctx: str) -> _Val:
        """A static `tensor.insert_slice` of a kernel argument at `idx`: the argument loaded at
        `(idx - offset) // stride` where idx lies on the slice's lattice, the destination elsewhere.
        A transposed convolution reads its zero-stuffed input this way: the input once, no
        stuffed buffer written."""
        src, dest = op.operands[0], op.operands[1]
        offs, sizes, strides = (list(ir.DenseI64ArrayAttr(op.attributes[a]))
                                for a in ("static_offsets", "static_sizes", "static_strides"))
        arg = next((i for i, a in enumerate(self.p.args) if a == src), None)
        if arg is None or len(op.operands) != 2 or any(x < 0 for x in offs + sizes + strides):
            raise CodegenError(op, "tensor.insert_slice of a computed value or with dynamic offsets")
        if _shape(src) != sizes:
            raise CodegenError(op, "tensor.insert_slice of a rank-reduced source")
        base = self.value(dest, idx, ctx)
        pos, conds = [], []
        for lin, o, n, k, full in zip(idx, offs, sizes, strides, _shape(dest)):
            t = lin + Lin.cst(-o)
            if (o, k, n) == (0, 1, full):  # the whole dim: every index is inside
                pos.append(t)
                continue
            if t.is_const():
                if not (0 <= t.const <= k * (n - 1) and t.const % k == 0):
                    return base
                pos.append(Lin.cst(t.const // k))
                continue
            text = self.lin_text(t, ctx)
            conds += [f"({text} >= 0)", f"({text} <= {k * (n - 1)})"] + ([f"(({text}) % {k} == 0)"] if k > 1 else [])
            pos.append(t if k == 1 else Quot(t, k))
        fill = base if base.const is not None else None
        val = self.load(arg, tuple(pos), ctx, conds, fill)
        if fill is not None or not conds:
            return val
        cls = set(val.cls).union(*[self.lin_cls(lin) for lin in idx])
        text = f"tl.where({' & '.join(conds)}, {val.text}, {base.text})"
        return _Val(self.line(ctx, cls, text, f"{ctx}_ins"), val.ty, frozenset(cls))

    def bounded_value(self, v, idx: tuple, ctx: str, conds, bounded) -> _Val:
        """`v` at `idx` computed in the kernel where only `conds` hold (inside a pad, in one piece of
        a concatenation): every load under it indexed by a `bounded` position takes them as masks."""
        self.inside.append((tuple(conds), tuple(bounded)))
        try:
            return self.value(v, idx, ctx)
        finally:
            self.inside.pop()

    def load(self, i: int, idx: tuple, ctx: str, inside: list | None = None, fill: _Val | None = None) -> _Val:
        ty = _elem(self.p.args[i])
        if ty not in _PTR:
            raise CodegenError(self.p.func, f"kernel argument of element type {ty}")
        terms = []
        cls = set()
        for j, lin in enumerate(idx):
            if lin.is_const() and lin.const == 0:
                continue
            t = self.lin_text(lin, ctx)
            cls |= self.lin_cls(lin)
            terms.append(f"({t}) * in{i}_s{j}" if (" " in t) else f"{t} * in{i}_s{j}")
        addr = f"in{i}_ptr" + "".join(f" + {t}" for t in terms)
        tile = self.mask(cls, ctx)
        # under a pad, a load indexed by a padded position is masked to the unpadded region (its
        # address may lie outside the tensor there); loads of per-channel values need no mask
        outer = []
        for conds, bounded in self.inside:
            if any(lin in bounded for lin in idx):
                if set().union(*[self.lin_cls(lin) for lin in bounded]) - cls:
                    raise CodegenError(self.p.gen, "a padded load whose bounds vary along an axis its address does not")
                outer += conds
        m = " & ".join(([tile] if tile else []) + outer + list(inside or [])) or None
        other = "0.0" if _is_float(ty) else "0"
        if fill is not None:
            other = fill.text
        text = f"tl.load({addr}, mask={m}, other={other})" if m else f"tl.load({addr})"
        if ctx in ("e", "init") and cls == {"m"} and m in (None, "mask_m") and self.gpu:
            # a per-row vector (a convolution's per-channel scale) loaded 1-D, then expanded: Triton
            # 3.6 loads a [BLOCK_M, 1] tensor once per accumulator element (64 loads a thread, not
            # 2). GPU targets only: the Ascend adapter's lowering (cann, cpu) has no reshape
            flat = f"tl.reshape({addr}, (BLOCK_M,))"
            text = (f"tl.load({flat}, mask=tl.reshape(mask_m, (BLOCK_M,)), other={other})[:, None]" if m
                    else f"tl.load({flat})[:, None]")
        if ctx == "b":
            self.b_loads.append((i, idx))
        elif ctx == "a":
            self.a_inputs.add(i)
            self.a_loads.append((i, idx))
        name = self.line(ctx, cls, text, f"{ctx}_in{i}_")
        zero_other = fill is None or fill.const == 0
        return _Val(name, ty, frozenset(cls),
                    zero_k=("k" in cls and tile is not None and "mask_k" in tile and zero_other))

    def size_scalar(self, v, op) -> _Val:
        """A kernel's scalar argument read in a body: a size (an arange's start at the cache's length),
        written as its expression over the size parameters (uniorch/ir/dims.py)."""
        from uniorch.ir import dims

        if _is_shaped(v) or "uniorch.arg_dims" not in self.p.func.attributes:
            raise CodegenError(op, "body uses a block argument of another region")
        try:
            size = dims.index_value(v)
        except dims.UnknownSize as err:
            raise CodegenError(op, f"a scalar kernel argument: {err}") from None
        return _Val(_body.size_scalar(size, str(v.type)), str(v.type))

    def scalar(self, v, op) -> _Val:
        if isinstance(v.owner, ir.Block):
            return self.size_scalar(v, op)
        p = _producer(v)
        if p is None or p.name != "arith.constant":
            raise CodegenError(op, "scalar operand that is not a constant")
        ty = str(v.type)
        c = _round(_const_value(p), ty)
        return _Val(_lit(c, ty), ty, frozenset(), const=c)

    def generic(self, op, result_no: int, idx: tuple, ctx: str) -> _Val:
        """A pointwise generic's result at `idx`: evaluate its body there."""
        if "reduction" in _iterators(op):
            if ROW_STAT in op.attributes:
                return self.row_sum(op, idx, ctx)
            if WINDOW_PRODUCER in op.attributes:
                return self.windowed(op, result_no, idx, ctx)
            raise CodegenError(op, "a second reduction inside a contraction kernel")
        view = op.opview
        n_in = len(view.inputs)
        maps = _maps(op)
        sizes = _loop_sizes(op)
        env = output_env(op, maps[n_in + result_no], idx, consts=False)
        for d, s in enumerate(sizes):
            if env[d] is None:
                if s != 1:
                    raise CodegenError(op, "pointwise generic whose output map does not cover its loops")
                env[d] = Lin.cst(0)
        role = {"a": "A-operand producer", "b": "B-operand producer", "init": "accumulator init",
                "e": "epilogue"}[ctx]
        body = op.regions[0].blocks[0]
        body_ops = [_as_op(o) for o in body.operations]
        yop = body_ops[-1]
        operands = list(view.inputs) + list(view.outputs)
        local: list = []

        def arg(n: int) -> _Val:
            v = operands[n]
            if not _is_shaped(v):
                return self.scalar(v, op)
            if n >= n_in and _is_empty(v):
                raise CodegenError(op, "body reads an uninitialised output (tensor.empty)")
            sub = tuple(_lin(e, env, op) for e in maps[n].results)
            return self.value(v, sub, ctx)

        self.frames.append({"header": f"# {role}: {op.name} at {_loc(op)}", "loc": _loc(op), "done": set()})
        try:
            return self.body_value(op, body, body_ops, yop.operands[result_no], env, ctx, local, arg)
        finally:
            self.frames.pop()

    def body_value(self, op, body, body_ops, v, env, ctx, local, arg) -> _Val:
        for lv, val in local:
            if lv == v:
                return val
        owner = v.owner
        if isinstance(owner, ir.Block):
            if owner != body:
                val = self.size_scalar(v, op)
                local.append((v, val))
                return val
            val = arg(ir.BlockArgument(v).arg_number)
        else:
            d = _as_op(owner)
            if not any(d == b for b in body_ops):
                if d.name != "arith.constant" or _is_shaped(v):
                    raise CodegenError(d, "body uses a non-constant value defined outside it")
                ty = str(v.type)
                c = _round(_const_value(d), ty)
                val = _Val(_lit(c, ty), ty, frozenset(), const=c)
            elif d.name == "tensor.extract":  # its tensor is read from memory, not evaluated here
                ins = [self.body_value(op, body, body_ops, w, env, ctx, local, arg) for w in list(d.operands)[1:]]
                val = self.gather(d, ins, ctx)
            else:
                ins = [self.body_value(op, body, body_ops, w, env, ctx, local, arg) for w in d.operands]
                val = self.scalar_op(d, ins, env, ctx)
        local.append((v, val))
        return val

    # -- scalar ops -----------------------------------------------------------------------------

    def scalar_op(self, d, ins: list[_Val], env, ctx) -> _Val:
        name = d.name
        if len(d.results) != 1:
            raise CodegenError(d, "op with several results")
        ty = str(d.results[0].type)
        cls = frozenset().union(*[v.cls for v in ins]) if ins else frozenset()
        loc = _loc(d)

        def emit(text, t=ty, c=cls):
            return _Val(self.line(ctx, c, text, ctx[0] if ctx != "init" else "i", loc), t, frozenset(c))

        if name == "arith.constant":
            c = _round(_const_value(d), ty)
            return _Val(_lit(c, ty), ty, frozenset(), const=c)
        if name == "linalg.index":
            lin = env[ir.IntegerAttr(d.attributes["dim"]).value]
            if lin.is_const():
                return _Val(str(lin.const), ty, frozenset(), const=lin.const)
            return emit(self.lin_text(lin, ctx), ty, frozenset(self.lin_cls(lin)))
        if name == "affine.apply":  # a gather's flattened index (DeBERTa's relative positions)
            amap = ir.AffineMapAttr(d.attributes["map"]).value
            texts = [v.text for v in ins]
            return emit(_body.affine_code(amap.results[0], texts[:amap.n_dims], texts[amap.n_dims:]))
        folded = _fold(name, d, ins, ty)
        if folded is not None:
            return _Val(_lit(folded, ty), ty, frozenset(), const=folded)
        if name in _CASTS and ins[0].ty == ty:
            return ins[0]
        # Constants stay Python literals where Triton's weak typing gives the MLIR result type
        # (binary arithmetic, comparisons, select); elsewhere they become typed 0-d tensors.
        all_const = bool(ins) and all(v.const is not None for v in ins)
        texts = [_body.constant_expr(v.const, v.ty) if v.const is not None and (all_const or name not in _LITERAL_OK)
                 else v.text for v in ins]
        try:
            text = _body.expression(d, texts, [v.ty for v in ins], ty,
                                    const_of=lambda i: ins[i].const if i < len(ins) else None)
        except KeyError as err:
            raise CodegenError(d, f"element type {err} not supported") from None
        return emit(text)

    # -- the kernel -----------------------------------------------------------------------------

    def operand(self, side: str, unscaled: bool = False, tile: bool = True) -> _Val:
        """The [BLOCK_M, BLOCK_K] (side "a") or [BLOCK_K, BLOCK_N] (side "b") dot operand; with
        `unscaled`, the 16-bit factor of a factor scaled by a constant (`_Plan.dot_scaled`), the
        constant left to the caller; with `tile` False, the factor's value as its body computes it
        (not broadcast to the tile, nor masked or widened: chain_lead.py's depthwise product)."""
        p = self.p
        v = p.x if side == "a" else p.y
        dot_ty = p.dot_types[0 if side == "a" else 1]
        scaled = p.dot_scaled[0 if side == "a" else 1]
        if unscaled and scaled is not None:
            v, dot_ty = scaled[0], scaled[3]
        ext = _producer(v)
        if dot_ty != str(v.type) and ext is not None and ext.name == "arith.extf":
            v = ext.operands[0]
        gen = p.gen
        body = gen.regions[0].blocks[0]
        body_ops = [_as_op(o) for o in body.operations]
        env = [Lin.cst(0) if p.cls[d] == "u" else Lin.dim(d) for d in range(len(p.sizes))]
        operands = list(gen.opview.inputs)

        def arg(n: int) -> _Val:
            w = operands[n]
            if not _is_shaped(w):
                return self.scalar(w, gen)
            sub = tuple(_lin(e, env, gen) for e in p.maps[n].results)
            return self.value(w, sub, side)

        header = f"# {'A' if side == 'a' else 'B'} operand ({side} tile) of the contraction at {_loc(gen)}"
        self.frames.append({"header": header, "loc": _loc(gen), "done": set()})
        try:
            val = self.body_value(gen, body, body_ops, v, env, side, [], arg)
        finally:
            self.frames.pop()
        if not tile:
            return val
        shape = "(BLOCK_M, BLOCK_K)" if side == "a" else "(BLOCK_K, BLOCK_N)"
        full = {"m", "k"} if side == "a" else {"k", "n"}
        text, ty = val.text, val.ty
        if val.const is not None:
            text = self.line(side, {"k"}, _body.full_expr(shape, text, _TL[ty]), side)
        elif set(val.cls) != full:
            text = self.line(side, {"k"}, f"tl.broadcast_to({text}, {shape})", side)
        if self.widen_bf16 and ty == "bf16":
            # see __init__: widen first
            text, ty = self.line(side, {"k"}, f"{text}.to(tl.float32)", side), "f32"
        if self.mask_k and not val.zero_k:
            self.need.add(f"mask_k{side}")
            text = self.line(side, {"k"}, f"tl.where(mask_k{side}, {text}, 0.0)", side)
        return _Val(text, ty, frozenset(full))

    def build(self) -> KernelSource:
        p, s = self.p, self.s
        ta, tb = p.dot_types
        wide_acc = "f64" in (ta, tb)
        self.acc_ty = "f64" if wide_acc else "f32"
        acc_tl = _TL[self.acc_ty]
        # operand types for tl.dot
        if wide_acc:
            dt = "f64"
        elif ta == tb and ta in ("f16", "bf16") and not (self.widen_bf16 and ta == "bf16"):
            dt = ta
        else:
            dt = "f32"
        prec = dot_precision(p.func, dt)
        self.dot_dt = dt

        factors: dict = {}  # tile side -> its factor before the cast to the dot's type

        def tile(side: str, w) -> str:
            self.win = w
            try:
                v = self.operand(side)
            finally:
                self.win = None
            factors.setdefault(side, v)
            # a 16-bit dot's operand is cast even where its MLIR type is already the dot's: Triton
            # types `tl.where(c, 0.0, h)` of an fp16 h as fp32 (a norm's zero guard before a
            # division), and rejected tl.dot(fp16, fp32): the contraction ran in PyTorch
            if v.ty == dt and dt not in ("f16", "bf16"):
                return v.text
            return self.line(side, {"k"}, f"{v.text}.to({_TL[dt]})", side)

        # a pooling epilogue: one accumulator per window element, each from the windowed factor's
        # tile at shifted positions and the other factor's tile, loaded once
        wins = list(range(p.windows)) if p.window is not None else [None]
        side = p.window.side if p.window is not None else None
        a_tiles = [tile("a", w) for w in wins] if side == "m" else [tile("a", None)] * len(wins)
        b_tiles = [tile("b", w) for w in wins] if side == "n" else [tile("b", None)] * len(wins)

        # accumulator init from the contraction's outs operand
        outs = p.gen.opview.outputs[0]
        self.pre.append(f"# accumulator: outs of the contraction at {_loc(p.gen)}")
        for w, at, bt in zip(wins, a_tiles, b_tiles):
            acc = "acc" if w is None else f"acc_w{w}"
            self.win = w
            try:
                init = self.value(outs, p.acc_layout, "init")
            finally:
                self.win = None
            self.pre.append(self._acc_init(acc, init, acc_tl))
            self.loop.append(f"{acc} = tl.dot({at}, {bt}, {acc}{prec})")

        # sibling products (passes/fuse_siblings.py): the same A tile, their own B tile and accumulator
        main = {k: getattr(p, k) for k in ("gen", "maps", "x", "y")}
        for k, c in enumerate(p.siblings):
            for key in main:
                setattr(p, key, c[key])
            try:
                self.pre.append(f"# accumulator of sibling product {k}: outs of the contraction at {_loc(p.gen)}")
                at, bt = (a_tiles[0], tile("b", None)) if p.shared == "a" else (tile("a", None), b_tiles[0])
                init = self.value(p.gen.opview.outputs[0], p.acc_layout, "init")
            finally:
                for key, val in main.items():
                    setattr(p, key, val)
            self.pre.append(self._acc_init(f"acc_s{k}", init, acc_tl))
            self.loop.append(f"acc_s{k} = tl.dot({at}, {bt}, acc_s{k}{prec})")
        self.operand_sum_loop(factors)

        return self.assemble(self.stores())

    def _acc_init(self, acc: str, init: _Val, acc_tl: str) -> str:
        """The accumulator's first value: a constant fill, or the outs tensor (a bias broadcast)."""
        if init.const is not None:
            return f"{acc} = {_body.full_expr('(BLOCK_M, BLOCK_N)', _lit(init.const, self.acc_ty), acc_tl)}"
        t = init.text if init.ty == self.acc_ty else f"{init.text}.to({acc_tl})"
        return f"{acc} = {t}" if set(init.cls) == {"m", "n"} else f"{acc} = tl.broadcast_to({t}, (BLOCK_M, BLOCK_N))"

    def stores(self) -> list[str]:
        """The store of every kernel result, in the output domain (after the K loop)."""
        p = self.p
        stores = []
        stats = {r for op in p.tile_stats for r in op.results} | self.operand_sum_results()
        for r, res in enumerate(p.results):
            if any(res == s for s in stats) or any(res == a for a in p.apart):
                continue  # stored per chunk by tile_stat_stores, or by the kernel's own code
            lay = _get(p.layouts, res)
            val = self.value(res, lay, "e")
            ty = _elem(res)
            if ty not in _PTR:
                raise CodegenError(_producer(res), f"kernel result of element type {ty}")
            text = val.text
            if val.const is not None:
                text = _body.full_expr("(BLOCK_M, BLOCK_N)", _lit(_round(val.const, ty), ty), _TL[ty])
            else:
                if val.ty != ty:
                    text = f"{text}.to({_TL[ty]})"
                if set(val.cls) != {"m", "n"}:
                    text = f"tl.broadcast_to({text}, (BLOCK_M, BLOCK_N))"
            terms = []
            for j, lin in enumerate(lay):
                if lin.is_const():
                    continue
                terms.append(f"{self.lin_text(lin, 'e')} * out{r}_s{j}")
            addr = f"out{r}_ptr" + "".join(f" + {t}" for t in terms)
            missing = {"m", "n"} - set().union(*[self.lin_cls(lin) for lin in lay])
            if missing and all((p.M if ax == "m" else p.N) == 1 for ax in missing):
                # M or N is a single element (a decode step's one token): rows or columns past it are
                # masked. Their addresses step by 1, not 0: Ascend's adapter (cann, cpu) rejects a
                # zero stride, and a decode step's kernels ran on the interpreter
                addr += "".join(" + offs_m[:, None]" if ax == "m" else " + offs_n[None, :]" for ax in sorted(missing))
            elif missing:
                # every row/column of the tile maps to one address (masked)
                addr = f"tl.broadcast_to({addr}, (BLOCK_M, BLOCK_N))"
            m = self.mask({"m", "n"}, "e")
            prod = _producer(res)
            where = _loc(prod) if prod is not None else ""
            stores.append(f"# result {r} ({_elem(res)} {_shape(res)}) at {where}")
            stores.append(f"tl.store({addr}, {text}, mask={m})" if m else f"tl.store({addr}, {text})")
        return stores + self.tile_stat_stores() + self.operand_sum_stores()

    def assemble(self, stores: list[str]) -> KernelSource:
        p, s = self.p, self.s
        fn = kernel_ident(p.name)
        in_ranks = [len(_shape(a)) for a in p.args]
        out_ranks = [len(_shape(r)) for r in p.results]
        symbols = kernel_symbols(p.func, [_shape(a) for a in p.args] + [_shape(r) for r in p.results])
        params = tensor_params(in_ranks, out_ranks) + symbols
        M, N, K, B = p.M, p.N, p.K, p.B
        bm, bn = s["block_m"], s["block_n"]
        # more than one tile along M / N (a symbolic extent may have any number)
        many_m = not isinstance(M, int) or -(-M // row_step(p, "m", bm)) > 1
        many_n = not isinstance(N, int) or -(-N // row_step(p, "n", bn)) > 1
        swizzle = s["group_m"] > 1 and many_m and many_n
        constexprs = {"BLOCK_M": s["block_m"], "BLOCK_N": s["block_n"], "BLOCK_K": s["block_k"]}
        if swizzle:
            constexprs["GROUP_M"] = s["group_m"]
        params.extend(f"{k}: tl.constexpr" for k in constexprs)

        def describe(c):
            ds = p.order[c]
            if not ds:
                return "1"
            return " x ".join(f"d{d}({p.sizes[d]})" for d in ds) + (f" = {p.extent(c)}" if len(ds) > 1 else "")

        out = ["import triton.language as tl", "", "", "@jit"]
        out.append(f"def {fn}(")
        out.append("    " + ", ".join(params) + ",")
        out.append("):")
        body = [
            f"# {p.name}: tiled tl.dot contraction (kind 'contraction')",
            f"# contraction: {p.gen.name} at {_loc(p.gen)}",
            f"#   batch = {describe('b')}; M = {describe('m')}; N = {describe('n')}; K = {describe('k')}",
            "pid = tl.program_id(0)",
        ]
        if swizzle:
            body += [
                f"num_pid_m = ({size_code(M)} + {self.step_m} - 1) // {self.step_m}",
                f"num_pid_n = ({size_code(N)} + {self.step_n} - 1) // {self.step_n}",
                "# grouped ordering: GROUP_M row-tiles share their B tiles in L2",
                "group_id = pid // (GROUP_M * num_pid_n)",
                "first_pid_m = group_id * GROUP_M",
                "group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)",
                "pid_m = first_pid_m + (pid % (GROUP_M * num_pid_n)) % group_size_m",
                "pid_n = (pid % (GROUP_M * num_pid_n)) // group_size_m",
            ]
        elif not many_n:
            body += ["pid_m = pid", "pid_n = 0"]
        elif not many_m:
            body += ["pid_m = 0", "pid_n = pid"]
        else:
            body += [f"pid_m = pid // (({size_code(N)} + {self.step_n} - 1) // {self.step_n})",
                     f"pid_n = pid % (({size_code(N)} + {self.step_n} - 1) // {self.step_n})"]
        body += [f"offs_m = pid_m * {self.step_m} + tl.arange(0, BLOCK_M)",
                 f"offs_n = pid_n * {self.step_n} + tl.arange(0, BLOCK_N)"]
        if p.order["b"]:
            body.append("pid_b = tl.program_id(1)")
        body += self.index_defs("b", "pid_b")
        body += self.index_defs("m", "offs_m[:, None]")
        body += self.index_defs("n", "offs_n[None, :]")
        body += [f"{name} = {text}  # window element {name.rsplit('_w', 1)[1]}" for name, text in self.win_defs.items()]
        if "mask_m" in self.need:
            mask = f"offs_m[:, None] < {size_code(M)}"
            if self.step_m != "BLOCK_M":  # one chunk per tile: the block's rest is the next tile's
                mask = f"({mask}) & (tl.arange(0, BLOCK_M)[:, None] < {self.step_m})"
            body.append(f"mask_m = {mask}")
        if "mask_n" in self.need:
            mask = f"offs_n[None, :] < {size_code(N)}"
            if self.step_n != "BLOCK_N":
                mask = f"({mask}) & (tl.arange(0, BLOCK_N)[None, :] < {self.step_n})"
            body.append(f"mask_n = {mask}")
        body += self.pre
        body.append(f"for k0 in range(0, {size_code(K)}, BLOCK_K):")
        inner = ["offs_k = k0 + tl.arange(0, BLOCK_K)"]
        inner += self.index_defs("k", "offs_k[None, :]", ctx="a")
        inner += self.index_defs("k", "offs_k[:, None]", ctx="b")
        if "mask_ka" in self.need:
            inner.append(f"mask_ka = offs_k[None, :] < {size_code(K)}")
        if "mask_kb" in self.need:
            inner.append(f"mask_kb = offs_k[:, None] < {size_code(K)}")
        inner += self.loop
        body += ["    " + ln for ln in inner]
        body += self.post
        body += stores
        out += ["    " + ln for ln in body]
        source = "\n".join(out) + "\n"
        helpers = _body.helpers_used(source)
        if helpers:  # body.py's @jit helpers (_tanh, _powf, ...), defined before the kernel
            source = "import triton.language as tl\n\n\n" + "\n\n".join(_body.HELPERS[h] for h in helpers) \
                + "\n\n" + source[len("import triton.language as tl\n\n\n"):]
        ptypes = [_PTR[_elem(a)] for a in p.args] + [_PTR[_elem(r)] for r in p.results]
        grid = (size_prod([size_cdiv(M, row_step(p, "m", bm)), size_cdiv(N, row_step(p, "n", bn))]), B, 1)
        return KernelSource(
            name=p.name, fn_name=fn, source=source, input_ranks=in_ranks, output_ranks=out_ranks,
            grid=grid, constexprs=constexprs, num_warps=s["num_warps"], num_stages=s["num_stages"],
            pointer_types=ptypes, symbols=symbols,
            symbol_dims=symbol_dims(p.func, symbols, [_shape(a) for a in p.args] + [_shape(r) for r in p.results]),
            relayout=fma_relayout(self) + channels_last_relayout(self),
        )

    def index_defs(self, c: str, flat: str, ctx: str = "") -> list[str]:
        """Definitions of the needed per-dimension indices of class `c` from the flat offsets."""
        p = self.p
        out = []
        dims = p.order[c]
        prefix = {"b": "bt", "m": "m", "n": "n", "k": f"k{ctx}"}[c]
        for i, d in enumerate(dims):
            name = f"{prefix}{i}"
            if name not in self.need:
                continue
            inner = size_prod([p.sizes[e] for e in dims[i + 1:]]) if i + 1 < len(dims) else 1
            text = flat if inner == 1 else f"{flat} // {size_code(inner)}"
            if c == "k" and p.channels_last is not None and inner != 1 and isinstance(inner, int) \
                    and inner % self.s["block_k"] == 0:
                text = f"k0 // {inner}"  # one window position per K tile: a scalar, masks constant along K
            elif c == "n" and p.channels_last == dims[-1] and inner != 1 and isinstance(inner, int) \
                    and inner % self.s["block_n"] == 0 and self.step_n == "BLOCK_N":
                text = f"pid_n * BLOCK_N // {inner}"  # a weight gradient's window position, per N tile
            if i > 0:
                text += f" % {size_code(p.sizes[d])}"
            out.append(f"{name} = {text}  # d{d} ({p.sizes[d]})")
        return out
