"""Scatter kernels: `tm_tensor.scatter` (index_put, index_add/copy/fill, scatter, scatter_add,
scatter_reduce, max_unpool, embedding and pooling backward, ...).

Semantics (torch-mlir's TMTensor, XLA-like): `ins(updates, indices) outs(original)`; indices are
`[N, depth]`, updates `[N, slice...]`. Update element `(n, j...)` goes to the original element
whose trailing `len(slice)` coordinates are `j...`, and whose dim `dimension_map[i]` is offset by
`indices[n, i]`. The region combines `(update, current)` into the stored value.

The kernel writes into its result, which the runtime first fills with a copy of `original`
(`uniorch.inplace`: result 0 aliases the original; passes/plan_memory.py reuses the original's
buffer when nothing reads it afterwards, runtime/plan.py copies otherwise). A global copy cannot
precede the scatter inside one launch (no grid-wide barrier), so the copy is never in the kernel.
One program handles BLOCK_P update elements:

- overwrite (`yield update`): `tl.store`; duplicate indices pick one update, as in PyTorch, where
  the winner is unspecified too;
- add of the update (or of a constant: scatter_reduce's mean counts): `tl.atomic_add`;
- integer max/min (32/64-bit): `tl.atomic_max/min`;
- anything else the region combines with one op (mul, float max/min, which must propagate NaN as
  `arith.maximumf`/`minimumf` do, 16-bit max/min): a compare-and-swap loop on the element's bits,
  exact for any combiner. 8-bit and bool destinations have no atomics: they stay eager unless
  the scatter overwrites.

Negative indices are wrapped once (index_put allows them; scatter rejects them in eager, so no
valid program changes); indices still out of bounds skip their update (eager raises).
"""
from __future__ import annotations

from torch_mlir import ir

from uniorch.ir import dims

from . import body as B
from . import patterns as pat
from .scan import _cdiv, _next_pow2, _sched_from_attr, _shape  # shared by the tm_tensor kinds
from .domain import VIEW_OPS
from .scatter_updates import UpdateEmitter, computed_operand, in_kernel, loops_at
from .source import CodegenError, KernelSource, symbol_dims

# region op -> (kind, Triton combine of current `a` and operand `b`)
_OPS = {
    "arith.addf": ("add", "a + b"), "arith.addi": ("add", "a + b"),
    "arith.mulf": ("mul", "a * b"), "arith.muli": ("mul", "a * b"),
    "arith.maximumf": ("max", "tl.where((a != a) | (a > b), a, b)"),
    "arith.minimumf": ("min", "tl.where((a != a) | (a < b), a, b)"),
    "arith.maxsi": ("max", "tl.maximum(a, b)"), "arith.minsi": ("min", "tl.minimum(a, b)"),
}
_INT_BITS = {"f32": "tl.int32", "f64": "tl.int64", "f16": "tl.int16", "bf16": "tl.int16",
             "i16": "tl.int16", "i32": "tl.int32", "i64": "tl.int64"}


class _Scatter:
    """The parts of a scatter kernel function codegen needs, checked."""

    def __init__(self, func):
        self.func = pat.op_of(func)
        self.name = ir.StringAttr(self.func.attributes["sym_name"]).value
        blk = self.func.regions[0].blocks[0]
        ops = [pat.op_of(o) for o in blk.operations]
        scatters = [o for o in ops if o.name == "tm_tensor.scatter"]
        if len(scatters) != 1:
            raise CodegenError(self.func, "a scatter kernel holds exactly one tm_tensor.scatter")
        op = self.op = scatters[0]
        if len(op.operands) != 3:
            raise CodegenError(op, "expected ins(updates, indices) outs(original)")
        self.producer, self.upd_r, views = computed_operand(op, 0)
        self.idx_gen, self.idx_r, idx_views = computed_operand(op, 1)
        computed = in_kernel([self.producer, self.idx_gen])
        inside = [op] + views + idx_views + computed
        for o in ops[::-1]:  # a view a computed generic writes into (its `outs`, never read)
            if o.name in VIEW_OPS and all(any(pat.op_of(u.owner) == x for x in inside) for u in o.results[0].uses):
                inside.append(o)
        for o in ops:
            if not any(o == x for x in inside) and o.name not in ("tensor.empty", "arith.constant", "func.return"):
                raise CodegenError(o, "only the scatter and the pointwise ops computing its updates and indices "
                                      "run in a scatter kernel")
        self.args = list(blk.arguments)
        if dims.has_symbols(self.func):  # `index` arguments only size tensor.empty ops (as a scan's)
            self.args = [a for a in self.args if isinstance(a.type, ir.ShapedType)]
        pos = []
        # into a fresh `tensor.empty` (an inverse permutation: `inv = empty_like(p); inv[p] = arange`,
        # as transformers' MoE unsorts its experts' rows): the kernel's own output, nothing to copy
        dest = op.operands[2].owner
        self.fresh = not isinstance(dest, ir.Block) and pat.op_of(dest).name == "tensor.empty"
        computed_here = (self.producer is not None, self.idx_gen is not None, self.fresh)
        for k, v in enumerate(op.operands):
            if computed_here[k]:
                pos.append(None)
                continue
            i = next((j for j, a in enumerate(self.args) if a == v), None)
            if i is None:
                raise CodegenError(op, "scatter operands must be kernel arguments")
            pos.append(i)
        self.upd, self.idx, self.orig = pos
        if not self.fresh and (self.orig is None or self.orig in (self.upd, self.idx)):
            raise CodegenError(op, "the destination is also read as updates or indices")
        if not self.fresh and any(v == self.args[self.orig] for g in computed
                                  for v in list(pat.inputs(g)) + pat.captured_values(g)):
            raise CodegenError(op, "the updates or indices read the destination, which the kernel writes in place")
        ret = pat.op_of(ops[-1])
        if len(ret.operands) != 1 or ret.operands[0] != op.results[0]:
            raise CodegenError(ret, "a scatter kernel returns only the scatter's result")
        # sizes as ints or expressions over the size symbols (a sequence length: an embedding's
        # gradient in training over varying lengths), passed to the kernel after its tensors
        self.shape = dims.shape(op.results[0])
        self.ushape = dims.shape(op.operands[0])
        self.ishape = dims.shape(op.operands[1])
        self.ty = B.elem_name(op.results[0].type)
        self.ity = B.elem_name(op.operands[1].type)
        if len(self.ishape) != 2 or self.ity not in ("i32", "i64") or not isinstance(self.ishape[1], int):
            raise CodegenError(op, "indices must be a rank-2 i32/i64 tensor of static depth")
        self.depth = self.ishape[1]
        self.dim_map = list(ir.DenseI64ArrayAttr(op.attributes["dimension_map"]))
        if len(self.dim_map) != self.depth:
            raise CodegenError(op, "dimension_map does not match the index depth")
        self.total = dims.prod(self.ushape)
        shapes = [dims.shape(a) for a in self.args] + [self.shape]
        self.symbols = dims.kernel_symbols(self.func, shapes)
        self.symbol_dims = symbol_dims(self.func, self.symbols, shapes)
        self.mode, self.operand = self._combiner()

    def _combiner(self) -> tuple[str, str]:
        """(mode, the operand combined in: "u" = the update, else a literal)."""
        blk = self.op.regions[0].blocks[0]
        upd, cur = blk.arguments
        body = [pat.op_of(o) for o in blk.operations]
        y = body[-1]
        if len(body) == 1:
            if y.operands[0] == upd:
                return "store", "u"
            raise CodegenError(self.op, "scatter region keeps the current value")
        if len(body) != 2 or y.operands[0] != body[0].results[0]:
            raise CodegenError(self.op, "scatter region is not a single combining op")
        comb = body[0]
        if comb.name not in _OPS or len(comb.operands) != 2 or list(comb.operands).count(cur) != 1:
            raise CodegenError(comb, "scatter combiner is not a supported op of the current value")
        other = comb.operands[1] if comb.operands[0] == cur else comb.operands[0]
        if other == upd:
            operand = "u"
        else:
            c = other.owner
            if isinstance(c, ir.Block) or pat.op_of(c).name != "arith.constant":
                raise CodegenError(comb, "scatter combiner reads something other than the update or a constant")
            attr = pat.op_of(c).attributes["value"]
            val = ir.FloatAttr(attr).value if self.ty in B.FLOATS else ir.IntegerAttr(attr).value
            operand = B.constant_expr(val, self.ty)
        return comb.name, operand

    def strategy(self) -> str:
        """How updates are combined: store | atomic_add | atomic_max | atomic_min | cas."""
        if self.mode == "store":
            return "store"
        kind = _OPS[self.mode][0]
        if self.ty == "bf16":
            # bf16 accumulation gave wrong answers on the interpreter (its bf16 is uint16 bits)
            # and is unverified on GPUs here; overwrite scatters of bf16 compile
            raise CodegenError(self.op, f"{kind}-accumulating scatter into bf16 is not supported yet")
        bits = {"f32": 32, "f64": 64, "f16": 16}.get(self.ty) or B.BITS.get(self.ty, 0)
        if kind == "add" and self.ty in ("f32", "f64", "f16", "bf16", "i32", "i64"):
            return "atomic_add"
        if kind in ("max", "min") and self.ty in ("i32", "i64"):
            return f"atomic_{kind}"
        if bits in (16, 32, 64) and self.ty in _INT_BITS:
            return "cas"
        raise CodegenError(self.op, f"no atomic {kind} for element type {self.ty} (8-bit and bool "
                                    "destinations have no atomics; overwrite scatters only)")


def choose_schedule(kernel_func, target: str) -> dict:
    s = _Scatter(kernel_func)
    s.strategy()
    interp = (target or "interpret").split(":", 1)[0] == "interpret"
    total = dims.hinted(s.total, dims.hints(s.func))  # a symbolic size: blocks for the capture's size
    block = max(1, min(_next_pow2(total), 4096 if interp else 512))
    warps = 4 if block >= 512 else 2 if block >= 128 else 1
    _mark_inplace(s)
    return {"block_p": block, "block_r": 1, "block_k": 0, "num_warps": warps, "num_stages": 1,
            "looped": False, "grid": [_grid(s.total, block), 1, 1]}


def _grid(total, block: int):
    return max(1, _cdiv(total, block)) if isinstance(total, int) else dims.grid_entry(dims.cdiv(total, block))


def _mark_inplace(s: _Scatter) -> None:
    with s.func.context:  # -1: a fresh output (plan.inplace_of)
        s.func.attributes["uniorch.inplace"] = ir.ArrayAttr.get(
            [ir.IntegerAttr.get(ir.IntegerType.get_signless(64), -1 if s.fresh else s.orig)])


def generate_scatter(kernel_func, target: str, schedule: dict | None = None) -> KernelSource:
    s = _Scatter(kernel_func)
    strategy = s.strategy()
    if "uniorch.inplace" not in s.func.attributes:
        _mark_inplace(s)
    sched = schedule or _sched_from_attr(s.func) or choose_schedule(s.func, target)
    block = int(sched["block_p"])
    fn = "".join(c if c.isalnum() or c == "_" else "_" for c in s.name)
    in_ranks = [len(_shape(a)) for a in s.args]
    rank = len(s.shape)
    params = []
    for i, r in enumerate(in_ranks):
        params += [f"in{i}_ptr"] + [f"in{i}_s{d}" for d in range(r)]
    params += ["out0_ptr"] + [f"out0_s{d}" for d in range(rank)] + s.symbols + ["BLOCK_P: tl.constexpr"]

    u, x = s.upd, s.idx
    loc = str(s.op.location)
    lines = [
        f'"""Generated by uniorch from kernel @{s.name} (scatter). Do not edit."""',
        "import triton.language as tl", "", "",
    ]
    if strategy == "cas":
        lines += ["@jit", "def _any(a, b):", "    return a | b", "", "",
                  "@jit", "def _combine(a, b):", f"    return {_OPS[s.mode][1]}", "", ""]
    lines += [
        "@jit", f"def {fn}({', '.join(params)}):",
        f"    # {s.mode} scatter of updates {s.ushape} at indices {s.ishape} (dims {s.dim_map}) into "
        f"{s.shape} ({s.ty}) by {strategy}; at {loc}",
        "    lin = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)",
        f"    mask = lin < {dims.code(s.total)}",
    ]
    # coordinates of the update element, row-major over the update shape
    ucoord = []
    for d in range(len(s.ushape)):
        inner = dims.prod(s.ushape[d + 1:])
        e = "lin" if inner == 1 else f"(lin // {dims.code(inner)})"
        if d > 0:
            e = f"{e} % {dims.code(s.ushape[d])}"
        lines.append(f"    u{d} = {e}")
        ucoord.append(f"u{d}")
    upd_off = " + ".join(f"u{d}.to(tl.int64) * in{u}_s{d}" for d in range(len(s.ushape)))
    # destination coordinates: trailing dims from the update's slice, plus the indices
    starts: list[str | None] = [None] * rank
    slice_ivs = ucoord[1:]
    offset = rank - len(slice_ivs)
    if offset < 0:
        raise CodegenError(s.op, "update slice rank exceeds the destination's")
    for k, iv in enumerate(slice_ivs):
        starts[offset + k] = f"{iv}.to(tl.int64)"
    for i, d in enumerate(s.dim_map):
        if s.idx_gen is not None:  # computed here: the index generic's element (u0, i)
            em = UpdateEmitter(s.idx_gen, s.args, lines, "mask", prefix=f"j{i}_")
            code, _ = em.value(loops_at(s.idx_gen, s.ishape, ["u0", f"tl.full([], {i}, tl.int64)"]), s.idx_r)
            lines.append(f"    j{i} = ({code}).to(tl.int64)")
        else:
            lines.append(f"    j{i} = tl.load(in{x}_ptr + u0.to(tl.int64) * in{x}_s0 + {i} * in{x}_s1, mask=mask, other=0).to(tl.int64)")
        lines.append(f"    j{i} = tl.where(j{i} < 0, j{i} + {dims.code(s.shape[d])}, j{i})")
        starts[d] = f"j{i}" if starts[d] is None else f"({starts[d]} + j{i})"
    if any(st is None for st in starts):
        raise CodegenError(s.op, "index depth and update slice do not cover the destination")
    for d, st in enumerate(starts):
        lines.append(f"    c{d} = {st}")
        lines.append(f"    mask = mask & (c{d} >= 0) & (c{d} < {dims.code(s.shape[d])})")
    dst_off = " + ".join(f"c{d} * out0_s{d}" for d in range(rank)) if rank else "lin * 0"  # 0-d: a block of one address
    lines.append(f"    dst = {dst_off}")
    if s.operand == "u" and s.producer is not None:
        em = UpdateEmitter(s.producer, s.args, lines, "mask", prefix="v_")
        code, ty = em.value(loops_at(s.producer, s.ushape, ucoord), s.upd_r)
        lines.append(f"    val = {code}" if ty == s.ty else f"    val = ({code}).to({B.tl_type(s.ty)})")
    elif s.operand == "u":
        # `other` given: Ascend's adapter aborts on a masked gather load without one
        lines.append(f"    val = tl.load(in{u}_ptr + {upd_off}, mask=mask, other=0)")
    else:
        lines.append(f"    val = {s.operand}")
    if dims.prod(s.shape) == 0 or s.total == 0:
        lines = lines[:lines.index(f"def {fn}({', '.join(params)}):") + 1] + ["    pass  # nothing to scatter"]
    elif strategy == "store":
        lines.append("    tl.store(out0_ptr + dst, val, mask=mask)")
    elif strategy.startswith("atomic_"):
        if s.operand != "u":
            lines.append(f"    val = tl.full([BLOCK_P], 0, {B.tl_type(s.ty)}) + val")
        lines.append(f"    tl.{strategy}(out0_ptr + dst, val, mask=mask)")
    else:
        # compare-and-swap on the bits; lanes that are done (or masked: they point at element 0)
        # swap a value with itself, which changes nothing
        it = _INT_BITS[s.ty]
        lines += [
            "    dst = tl.where(mask, dst, 0)",
            f"    bits_ptr = (out0_ptr + dst).to(tl.pointer_type({it}), bitcast=True)",
            "    done = ~mask",
            "    cur = tl.load(out0_ptr + dst)",
            "    while tl.reduce((~done).to(tl.int32), 0, _any) != 0:",
            "        new = tl.where(done, cur, _combine(cur, val))",
            f"        old_bits = cur.to({it}, bitcast=True)",
            f"        seen = tl.atomic_cas(bits_ptr, old_bits, new.to({it}, bitcast=True))",
            "        done = done | (seen == old_bits)",
            f"        cur = seen.to({B.tl_type(s.ty)}, bitcast=True)",
        ]
    helpers = B.helpers_used("\n".join(lines))
    if helpers:
        at = lines.index("@jit")
        lines[at:at] = [x for h in helpers for x in (B.HELPERS[h], "")]
    source = "\n".join(lines) + "\n"
    grid = (sched["grid"][0] if "grid" in sched else _grid(s.total, block),)
    return KernelSource(s.name, fn, source, in_ranks, [rank], grid, {"BLOCK_P": block},
                        int(sched.get("num_warps", 4)), 1, symbols=s.symbols, symbol_dims=s.symbol_dims)
