"""Sort kernels: `tm_tensor.sort` (aten.sort, argsort, msort, topk = sort + slice) and
`tm_tensor.topk` (aten.kthvalue) along one dimension.

One program sorts BLOCK_P rows, each padded to a power-of-two BLOCK_R >= its length, with a
bitonic network written out in the generated source (`tl.sort` is a library wrapper Triton's
interpreter cannot call, docs/kernels.md §4): unrolled for GPUs and the interpreter, loops over
its stages on Ascend's adapter's targets, cann and cpu (`_network`). What is sorted are (key, index) pairs:

* the key is an integer whose signed order is the order PyTorch sorts by: an integer value as
  is; a float's bits with the magnitude bits flipped for negatives (fp16/bf16 widened to fp32
  first), -0.0 made +0.0 and every NaN one positive NaN, so NaNs come after +inf, where PyTorch
  puts them; descending sorts complement the key (NaN first, as PyTorch);
* the index (the lane) breaks ties, so the sort is stable: what `stable=True` asks and a valid
  answer when it is not asked. Padding lanes get the largest key and indices past the row.

Values are then gathered from the input by the sorted indices, so they are the input's own bits.
A row longer than one block (ROW_MAX on a GPU, INTERP_ROW_MAX in Triton's interpreter and on the
cpu target) is left to eager (CodegenError from choose_schedule).

Kernel shape (what uniorch-fuse groups): the sort or topk, whose sorted input is a kernel
argument, and fills of its other operands (the index iota, topk's initial values).
"""
from __future__ import annotations

from torch_mlir import ir

from uniorch.ir import dims

from . import body as B
from . import patterns as pat
from .scan import _next_pow2, _row_coords, _sched_from_attr, _shape
from .rows import row_params
from .source import CodegenError, KernelSource, symbol_dims

ROW_MAX = 8192  # longest row sorted in one block on a GPU (32-bit keys); 64-bit keys: half
# Triton's interpreter runs a block as NumPy arrays, the cpu target in memory, neither with a
# register file to spill from: one block sorts rows up to this long there, whatever the key width
# (a 65536-long row sorts in seconds)
INTERP_ROW_MAX = 1 << 16
OPS = ("tm_tensor.sort", "tm_tensor.topk")

# comparison predicates by enum value: which order "a before b" means (cmpf / cmpi)
_CMPF = {4: "asc", 5: "asc", 12: "asc", 13: "asc", 2: "desc", 3: "desc", 10: "desc", 11: "desc"}
_CMPI = {2: "asc", 3: "asc", 4: "desc", 5: "desc"}
_INTS = ("i1", "i8", "i16", "i32", "i64", "ui8")


class _Sort:
    """The parts of a sort/topk kernel function codegen needs, checked."""

    def __init__(self, func):
        self.func = pat.op_of(func)
        self.name = ir.StringAttr(self.func.attributes["sym_name"]).value
        blk = self.func.regions[0].blocks[0]
        ops = [pat.op_of(o) for o in blk.operations]
        sorts = [o for o in ops if o.name in OPS]
        if len(sorts) != 1:
            raise CodegenError(self.func, "a sort kernel holds exactly one tm_tensor.sort or topk")
        op = self.op = sorts[0]
        self.topk = op.name == "tm_tensor.topk"
        self.args = list(blk.arguments)
        if dims.has_symbols(self.func):  # `index` arguments only size the outputs' tensor.empty
            self.args = [a for a in self.args if isinstance(a.type, ir.ShapedType)]
        operands = list(op.operands)
        if self.topk and len(operands) != 3:
            raise CodegenError(op, "topk with input indices")
        if not self.topk and len(operands) not in (1, 2):
            raise CodegenError(op, "sort of more than a value and an index tensor")
        src = operands[0]
        self.input = self._arg_index(src)
        if self.input is None:
            raise CodegenError(op, "the sorted tensor is not a kernel argument")
        self.dim = ir.IntegerAttr(op.attributes["dimension"]).value
        # the rows may be of symbolic count (a router's topk over a symbolic number of tokens); the
        # sorted length is a block's and must be a number
        self.shape = dims.shape(src)
        if not dims.is_static(self.shape[self.dim]):
            raise CodegenError(op, f"a sort along a dim of symbolic length ({self.shape[self.dim]}): one block "
                                   f"holds a row, and its size must be known when the kernel is compiled")
        self.ty = B.elem_name(src.type)
        if self.ty not in B.FLOATS + _INTS:
            raise CodegenError(op, f"sort of element type {self.ty}")
        self.n = int(self.shape[self.dim])
        self.k = int(dims.shape(op.results[0])[self.dim])  # columns written: n (sort) or k (topk)
        self.order = self._order()
        # where result indices come from: the lane (an iota fill, topk), or a gather from an argument
        self.index_src = None
        if self.topk:
            self._check_topk_init(operands[1], operands[2])
        elif len(operands) == 2:
            self.index_src = self._index_source(operands[1])
        for o in ops:
            if o == op or o.name in ("tensor.empty", "arith.constant", "func.return"):
                continue
            if not (pat.is_generic(o) and pat.is_fill(o)
                    and all(pat.op_of(u.owner) == op for r in o.results for u in r.uses)):
                raise CodegenError(o, "only fills of the sort's operands can share its kernel")
        ret = ops[-1]
        self.results = []  # per kernel result: 0 = values, 1 = indices
        for v in ret.operands:
            j = next((i for i, r in enumerate(op.results) if r == v), None)
            if j is None:
                raise CodegenError(ret, "a sort kernel returns only the sort's results")
            self.results.append(j)
        self.res_types = [B.elem_name(op.results[j].type) for j in self.results]
        self.outer = [s for d, s in enumerate(self.shape) if d != self.dim]
        self.rows = dims.prod(self.outer) if self.outer else 1
        shapes = [dims.shape(a) for a in self.args] + [dims.shape(op.results[j]) for j in self.results]
        self.symbols = dims.kernel_symbols(self.func, shapes)
        self.symbol_dims = symbol_dims(self.func, self.symbols, shapes)

    def _arg_index(self, v):
        return next((i for i, a in enumerate(self.args) if a == v), None)

    def _order(self) -> str:
        blk = self.op.regions[0].blocks[0]
        body = [pat.op_of(o) for o in blk.operations]
        a, b = list(blk.arguments)[:2]
        if len(body) != 2 or body[0].name not in ("arith.cmpf", "arith.cmpi") or body[1].operands[0] != body[0].results[0]:
            raise CodegenError(self.op, "comparator is not a single comparison")
        cmp = body[0]
        pred = ir.IntegerAttr(cmp.attributes["predicate"]).value
        order = (_CMPF if cmp.name == "arith.cmpf" else _CMPI).get(pred)
        if order is None:
            raise CodegenError(self.op, f"comparator predicate {pred} of {cmp.name} (unsigned or equality)")
        ops = list(cmp.operands)
        if ops == [b, a]:
            order = "desc" if order == "asc" else "asc"
        elif ops != [a, b]:
            raise CodegenError(self.op, "comparator does not compare the two values")
        return order

    def _fill_body(self, v):
        """The fill generic defining `v` inside the kernel and its body ops, or None."""
        if isinstance(v.owner, ir.Block):
            return None
        o = pat.op_of(v.owner)
        return (o, pat.body_ops(o)) if pat.is_generic(o) and pat.is_fill(o) else None

    def _index_source(self, v):
        """None when `v` is the iota along the sorted dim (the lane is the index), else the argument
        index to gather the initial indices from."""
        i = self._arg_index(v)
        if i is not None:
            return i
        fb = self._fill_body(v)
        if fb is not None:
            o, ops = fb
            y = pat.yield_op(o).operands[0]
            if (len(ops) in (1, 2) and ops[0].name == "linalg.index"
                    and ir.IntegerAttr(ops[0].attributes["dim"]).value == self.dim
                    and (len(ops) == 1 or ops[1].name == "arith.index_cast")
                    and y == ops[-1].results[0]):
                return None
        raise CodegenError(self.op, "sort indices start from something other than an iota or an argument")

    def _check_topk_init(self, vals, idxs):
        """topk merges its outs' initial entries into the result; a fill with the worst value
        (+inf ascending, -inf descending) never wins, so it is left out."""
        for v, want in ((vals, "worst"), (idxs, None)):
            fb = self._fill_body(v)
            if fb is None or fb[1]:
                raise CodegenError(self.op, "topk's initial outputs are not constant fills")
            if want is None:
                continue
            c = pat.yield_op(fb[0]).operands[0]
            if isinstance(c.owner, ir.Block) or pat.op_of(c.owner).name != "arith.constant":
                c = pat.inputs(fb[0])[0] if pat.inputs(fb[0]) else c
            val = None
            if not isinstance(c.owner, ir.Block) and pat.op_of(c.owner).name == "arith.constant":
                a = pat.op_of(c.owner).attributes["value"]
                val = ir.FloatAttr(a).value if isinstance(a, ir.FloatAttr) else ir.IntegerAttr(a).value
            if self.ty in B.FLOATS:
                worst = float("inf") if self.order == "asc" else float("-inf")
            elif self.ty in ("i1", "ui8"):
                raise CodegenError(self.op, f"topk of {self.ty}")
            else:
                top = (1 << (B.BITS[self.ty] - 1)) - 1
                worst = top if self.order == "asc" else -top - 1
            if val != worst:
                raise CodegenError(self.op, f"topk's initial values are {val}, not {worst}")

    def key_bits(self) -> int:
        return 64 if self.ty in ("f64", "i64") else 32


def choose_schedule(kernel_func, target: str) -> dict:
    s = _Sort(kernel_func)
    kind = (target or "interpret").split(":", 1)[0]
    interp = kind == "interpret"
    in_memory = kind in ("interpret", "cpu")  # no register file to spill from
    limit = INTERP_ROW_MAX if in_memory else ROW_MAX if s.key_bits() == 32 else ROW_MAX // 2
    block_r = _next_pow2(max(s.n, 2))
    if block_r > limit:
        raise CodegenError(s.op, f"row of {s.n} is longer than one block ({limit}); sorting it runs eagerly")
    budget = 16384 if interp else 4096
    rows = dims.hinted(s.rows, dims.hints(s.func))  # a symbolic count: tiles for the capture's
    block_p = max(1, min(_next_pow2(rows), budget // block_r, 1024 if interp else 64))
    elems = block_p * block_r
    warps = 8 if elems >= 4096 else 4 if elems >= 512 else 2 if elems >= 128 else 1
    if (target or "").startswith("rocm"):
        warps = max(1, warps // 2)
    return {"block_p": block_p, "block_r": block_r, "block_k": 0, "num_warps": warps, "num_stages": 1,
            "looped": False, "grid": [dims.grid_entry(dims.cdiv(s.rows, block_p)), 1, 1]}


# the compare-exchange step every sort kernel carries. Only builtins: a tl.reduce with our own
# combine function would do, but Triton's interpreter runs those one element at a time in Python
_HELPERS = '''@jit
def _exchange(key, idx, P: tl.constexpr, N: tl.constexpr, D: tl.constexpr, BLK: tl.constexpr):
    # bitonic step on (key, index) pairs D lanes apart, in blocks of BLK lanes sorted ascending
    # where lane & BLK == 0: lanes j and j ^ D are the halves of axis 1 of a [M, 2, D] view,
    # moved last and split
    M: tl.constexpr = P * N // (2 * D)
    klo, khi = tl.split(tl.permute(tl.reshape(key, (M, 2, D)), (0, 2, 1)))
    ilo, ihi = tl.split(tl.permute(tl.reshape(idx, (M, 2, D)), (0, 2, 1)))
    asc = (((tl.arange(0, M)[:, None] * (2 * D)) % N) & BLK) == 0
    # indices differ, so pairs are never equal: swap exactly when out of order for the direction
    swap = ((klo > khi) | ((klo == khi) & (ilo > ihi))) == asc
    key = tl.join(tl.where(swap, khi, klo), tl.where(swap, klo, khi))
    idx = tl.join(tl.where(swap, ihi, ilo), tl.where(swap, ilo, ihi))
    return (tl.reshape(tl.permute(key, (0, 2, 1)), (P, N)),
            tl.reshape(tl.permute(idx, (0, 2, 1)), (P, N)))
'''


def _looped_network(target: str) -> bool:
    """Whether the bitonic network runs as loops over its stages (`_network`): on Ascend's adapter's
    targets. Unrolled, the adapter aborts on a sort whose indices are not kept (an assertion in
    its use analysis), and on the cpu target LLVM's compile grows with the network's square
    (8192 lanes, 91 steps: 6 MB of LLVM IR, 142 s in LLVM's loop passes; looped: under a second).
    The gather becomes a call into Ascend's runtime (`backends/cpu/runtime_calls.py` on cpu)."""
    return (target or "").split(":", 1)[0] in ("cpu", "cann")


def _network(m: int, looped: bool) -> list[str]:
    """The bitonic network over 2**m lanes: stage s merges blocks of 2**s lanes, in steps exchanging
    lanes 2**(s-1), ..., 2, 1 apart. Unrolled, each step reshapes the tile with its distance as a
    constant (registers and shuffles on a GPU). Looped, the distance is a loop variable and each
    lane reads its partner, lane ^ d, with a gather: one step's code for all."""
    if not looped:
        return [f"    key, idx = _exchange(key, idx, BLOCK_P, BLOCK_R, {1 << sub}, {1 << stage})"
                for stage in range(1, m + 1) for sub in range(stage - 1, -1, -1)]
    return [f"    for stage in range(1, {m + 1}):",
            "        for step in range(0, stage):",
            "            d = 1 << (stage - 1 - step)",
            "            partner = tl.broadcast_to(lane ^ d, (BLOCK_P, BLOCK_R))",
            "            pkey = tl.gather(key, partner, 1)",
            "            pidx = tl.gather(idx, partner, 1)",
            "            before = (pkey < key) | ((pkey == key) & (pidx < idx))  # the partner sorts first",
            "            # the lower lane of a pair keeps the first of the two where its block ascends",
            "            take = tl.where(((lane & d) == 0) == ((lane & (1 << stage)) == 0), before, ~before)",
            "            key = tl.where(take, pkey, key)",
            "            idx = tl.where(take, pidx, idx)"]


def _key_lines(ty: str, bits: int) -> list[str]:
    """Lines turning the loaded `x` into `key` (see the module docstring)."""
    it = f"tl.int{bits}"
    if ty in _INTS:
        return [f"key = x.to({it})"]
    sign, nan = (31, "0x7FC00000") if bits == 32 else (63, "0x7FF8000000000000")
    mag = "0x7FFFFFFF" if bits == 32 else "0x7FFFFFFFFFFFFFFF"
    up = ".to(tl.float32)" if ty in ("f16", "bf16") else ""
    return [f"xf = x{up}",
            f"bits = xf.to({it}, bitcast=True)",
            f"key = bits ^ ((bits >> {sign}) & {mag})",
            f"key = tl.where(xf != xf, {nan}, tl.where(xf == 0, 0, key))"]


def generate_sort(kernel_func, target: str, schedule: dict | None = None) -> KernelSource:
    s = _Sort(kernel_func)
    sched = schedule or _sched_from_attr(s.func) or choose_schedule(s.func, target)
    block_p, block_r = int(sched["block_p"]), int(sched["block_r"])
    if block_r < s.n or block_r & (block_r - 1):
        raise CodegenError(s.op, f"row of {s.n} needs a power-of-two BLOCK_R >= it, got {block_r}")
    fn = "".join(c if c.isalnum() or c == "_" else "_" for c in s.name)
    ranks = [len(_shape(a)) for a in s.args]
    out_ranks = [len(s.shape)] * len(s.results)
    params = row_params(ranks, out_ranks)
    params[-2:-2] = s.symbols  # size symbols after the tensors, before the constexprs
    outer_dims, coords = _row_coords(len(s.shape), s.dim, s.outer)

    def offset(prefix, i, col) -> str:
        terms = [f"c{d} * {prefix}{i}_s{d}" for d in outer_dims] + [f"{col} * {prefix}{i}_s{s.dim}"]
        return " + ".join(terms)

    bits = s.key_bits()
    looped = _looped_network(target)
    kmax = (1 << (bits - 1)) - 1
    what = f"{'topk' if s.topk else 'sort'} ({'ascending' if s.order == 'asc' else 'descending'})"
    lines = [
        f'"""Generated by uniorch from kernel @{s.name} (sort). Do not edit."""',
        "import triton.language as tl", "", "", "" if looped else _HELPERS, "",
        "@jit", f"def {fn}({', '.join(params)}):",
        f"    # {what} along dim {s.dim} of {s.shape} ({s.ty}), {s.k} of {s.n} columns kept; at {s.op.location}",
        "    rows = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)[:, None]",
        f"    row_mask = rows < {dims.code(s.rows)}",
    ]
    lines += [f"    c{d} = {coords[d]}" for d in outer_dims]
    lines += [
        "    lane = tl.arange(0, BLOCK_R)[None, :]",
        f"    mask = row_mask & (lane < {s.n})",
        f"    x = tl.load(in{s.input}_ptr + {offset('in', s.input, 'lane')}, mask=mask, other=0)",
    ]
    lines += ["    " + ln for ln in _key_lines(s.ty, bits)]
    if s.order == "desc":
        lines.append("    key = ~key  # descending: the complement reverses the order")
    lines += [f"    key = tl.where(mask, key, {kmax})  # padding sorts last",
              "    idx = lane + rows * 0"]
    lines += _network(block_r.bit_length() - 1, looped)
    lines.append(f"    out_mask = row_mask & (lane < {s.k})")
    for j, r in enumerate(s.results):
        dst = f"out{j}_ptr + {offset('out', j, 'lane')}"
        if r == 0:
            val = f"tl.load(in{s.input}_ptr + {offset('in', s.input, 'idx')}, mask=out_mask)"
        elif s.index_src is not None:
            val = f"tl.load(in{s.index_src}_ptr + {offset('in', s.index_src, 'idx')}, mask=out_mask)"
        else:
            val = f"idx.to({B.tl_type(s.res_types[j])})"
        lines.append(f"    tl.store({dst}, {val}, mask=out_mask)")
    source = "\n".join(lines) + "\n"
    grid = sched.get("grid") or [dims.grid_entry(dims.cdiv(s.rows, block_p))]
    return KernelSource(s.name, fn, source, ranks, out_ranks, (grid[0],),
                        {"BLOCK_P": block_p, "BLOCK_R": block_r}, int(sched.get("num_warps", 4)), 1,
                        symbols=s.symbols, symbol_dims=s.symbol_dims)
