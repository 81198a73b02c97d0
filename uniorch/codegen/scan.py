"""Scan kernels: `tm_tensor.scan` (aten.cumsum, cumprod) along one dimension.

One program scans BLOCK_P rows. A row that fits in a block (BLOCK_R >= its length) is one
`tl.associative_scan`; a longer one is scanned in chunks of BLOCK_R, each chunk's scan combined
with the prefix carried from the chunks before it. The combiner is the scan region's single op
(add, mul, and/or/xor, signed min/max) applied to its two block arguments; f16/bf16 scans run in
fp32 and round each output once, as PyTorch's CPU kernels accumulate in fp32.

Kernel shape (what uniorch-fuse groups): fills of the scan's `outs`, `tensor.empty`, scalar
constants, and the scan, whose input is a kernel argument. Only inclusive scans: PyTorch's scans
lower to inclusive ones, and an exclusive one would read the accumulator's initial value.
"""
from __future__ import annotations

import math

from torch_mlir import ir

from uniorch.ir import dims

from . import body as B
from . import patterns as pat
from .rows import row_coords, row_params
from .patterns import recorded_schedule as _sched_from_attr  # noqa: F401 - sort.py and scatter.py import it here
from .source import CodegenError, KernelSource, symbol_dims

ROW_MAX = 4096  # longest row (32-bit elements) scanned in registers; longer rows loop
LOOP_BLOCK_R = 1024

# combiner op -> (Triton expression of a and b, patterns.COMBINERS identity spec)
_COMBINE = {
    "arith.addf": "a + b", "arith.addi": "a + b", "arith.mulf": "a * b", "arith.muli": "a * b",
    "arith.ori": "a | b", "arith.andi": "a & b", "arith.xori": "a ^ b",
    "arith.maxsi": "tl.maximum(a, b)", "arith.minsi": "tl.minimum(a, b)",
}


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _shape(v) -> list[int]:
    return list(ir.RankedTensorType(v.type).shape)


class _Scan:
    """The parts of a scan kernel function codegen needs, checked."""

    def __init__(self, func):
        self.func = pat.op_of(func)
        self.name = ir.StringAttr(self.func.attributes["sym_name"]).value
        blk = self.func.regions[0].blocks[0]
        ops = [pat.op_of(o) for o in blk.operations]
        scans = [o for o in ops if o.name == "tm_tensor.scan"]
        if len(scans) != 1:
            raise CodegenError(self.func, "a scan kernel holds exactly one tm_tensor.scan")
        op = self.op = scans[0]
        for o in ops:
            if o == op or o.name in ("tensor.empty", "arith.constant", "func.return"):
                continue
            if not (pat.is_generic(o) and pat.is_fill(o)
                    and all(pat.op_of(u.owner) == op for r in o.results for u in r.uses)):
                raise CodegenError(o, "only fills of the scan's outputs can share its kernel")
        if not ir.BoolAttr(op.attributes["inclusive"]).value:
            raise CodegenError(op, "exclusive scan (reads the accumulator's initial value)")
        self.args = list(blk.arguments)
        if dims.has_symbols(self.func):  # `index` arguments only size the outputs' tensor.empty
            self.args = [a for a in self.args if isinstance(a.type, ir.ShapedType)]
        src = op.operands[0]
        self.input = next((i for i, a in enumerate(self.args) if a == src), None)
        if self.input is None:
            raise CodegenError(op, "the scanned tensor is not a kernel argument")
        self.dim = ir.IntegerAttr(op.attributes["dimension"]).value
        # sizes: ints, or expressions of the size symbols (a symbolic compile: uniorch/ir/dims.py)
        self.shape = dims.shape(op.results[0])
        if dims.shape(src) != self.shape:
            raise CodegenError(op, "input and output shapes differ")
        self.ty = B.elem_name(op.results[0].type)
        if B.elem_name(src.type) != self.ty:
            raise CodegenError(op, "input and output element types differ")
        self.combiner = self._combiner()
        ret = pat.op_of(ops[-1])
        self.results = []  # per kernel result: 0 = scanned tensor, 1 = accumulator (row totals)
        for v in ret.operands:
            k = next((i for i, r in enumerate(op.results) if r == v), None)
            if k is None:
                raise CodegenError(ret, "a scan kernel returns only the scan's results")
            self.results.append(k)
        self.n = self.shape[self.dim]
        self.outer = [s for d, s in enumerate(self.shape) if d != self.dim]
        self.rows = dims.prod(self.outer) if self.outer else 1
        self.symbols = dims.kernel_symbols(self.func, [dims.shape(a) for a in self.args]
                                           + [dims.shape(v) for v in ret.operands])
        self.symbol_dims = symbol_dims(self.func, self.symbols,
                                       [dims.shape(a) for a in self.args] + [dims.shape(v) for v in ret.operands])

    def _combiner(self) -> str:
        blk = self.op.regions[0].blocks[0]
        body = [pat.op_of(o) for o in blk.operations]
        if len(body) != 2 or len(blk.arguments) != 2:
            raise CodegenError(self.op, "scan region is not a single combining op")
        comb, y = body
        a, b = blk.arguments
        if (comb.name not in _COMBINE or len(comb.operands) != 2 or {comb.operands[0], comb.operands[1]} != {a, b}
                or a == b or y.operands[0] != comb.results[0]):
            raise CodegenError(self.op, "scan combiner is not an associative op of its two arguments")
        return comb.name

    def elem_bits(self) -> int:
        return {"f64": 64, "f32": 32, "f16": 16, "bf16": 16}.get(self.ty) or B.BITS.get(self.ty, 32)


def choose_schedule(kernel_func, target: str) -> dict:
    s = _Scan(kernel_func)
    interp = (target or "interpret").split(":", 1)[0] == "interpret"
    limit = ROW_MAX if s.elem_bits() <= 32 else ROW_MAX // 2
    hints = dims.hints(s.func)  # a symbolic size: tiles for the capture's size
    n, rows = dims.hinted(s.n, hints), dims.hinted(s.rows, hints)
    if not dims.is_static(s.n):  # a row of any length: chunks with the carried prefix
        block_r, looped = min(_next_pow2(n), LOOP_BLOCK_R), True
    elif _next_pow2(n) <= limit:
        block_r, looped = _next_pow2(n), False
    else:
        block_r, looped = LOOP_BLOCK_R, True
    budget = 16384 if interp else 4096
    block_p = max(1, min(_next_pow2(rows), budget // block_r, 1024 if interp else 64))
    elems = block_p * block_r
    warps = 8 if elems >= 4096 else 4 if elems >= 512 else 2 if elems >= 128 else 1
    if (target or "").startswith("rocm"):
        warps = max(1, warps // 2)
    return {"block_p": block_p, "block_r": block_r, "block_k": 0, "num_warps": warps, "num_stages": 1,
            "looped": looped, "grid": [dims.grid_entry(dims.cdiv(s.rows, block_p)), 1, 1]}


def generate_scan(kernel_func, target: str, schedule: dict | None = None) -> KernelSource:
    s = _Scan(kernel_func)
    sched = schedule or _sched_from_attr(s.func) or choose_schedule(s.func, target)
    block_p, block_r, looped = int(sched["block_p"]), int(sched["block_r"]), bool(sched.get("looped"))
    if not looped and (not dims.is_static(s.n) or block_r < s.n):
        raise CodegenError(s.op, f"row of {s.n} does not fit BLOCK_R={block_r} and the schedule is not looped")
    low = s.ty in ("f16", "bf16")
    acc_t = "tl.float32" if low else B.tl_type(s.ty)
    ident = B.literal(B.identity_value(pat.COMBINERS[s.combiner], "f32" if low else s.ty), "f32" if low else s.ty)
    fn = "".join(c if c.isalnum() or c == "_" else "_" for c in s.name)
    ranks = [len(_shape(a)) for a in s.args]
    out_ranks = [len(s.shape) if k == 0 else len(s.shape) - 1 for k in s.results]
    params = row_params(ranks, out_ranks)
    params[-2:-2] = s.symbols  # size symbols after the tensors, before the constexprs

    # row coordinates: the non-scanned dims, row-major over the linear row index
    outer_dims, coords = _row_coords(len(s.shape), s.dim, s.outer)
    n_code, rows_code = dims.code(s.n), dims.code(s.rows)

    def full_offset(prefix, idx) -> str:
        terms = [f"c{d} * {prefix}{idx}_s{d}" for d in range(len(s.shape)) if d != s.dim]
        terms.append(f"cols * {prefix}{idx}_s{s.dim}")
        return " + ".join(terms)

    loc = str(s.op.location)
    lines = [
        f'"""Generated by uniorch from kernel @{s.name} (scan). Do not edit."""',
        "import triton.language as tl", "", "",
        "@jit", "def _combine(a, b):", f"    return {_COMBINE[s.combiner]}", "", "",
        "@jit", f"def {fn}({', '.join(params)}):",
        f"    # {s.combiner} scan along dim {s.dim} of {s.shape} ({s.ty}), inclusive; at {loc}",
        "    rows = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)[:, None]",
        f"    row_mask = rows < {rows_code}",
    ]
    for d in outer_dims:
        lines.append(f"    c{d} = {coords[d]}")
    in_off = full_offset("in", s.input)

    def body(ind: str, col0: str) -> list[str]:
        x = f"tl.load(in{s.input}_ptr + {in_off}, mask=mask, other={ident})"
        out = [f"{ind}lane = tl.arange(0, BLOCK_R)[None, :]", f"{ind}cols = {col0}lane",
               f"{ind}mask = row_mask & (cols < {n_code})",
               f"{ind}x = {x}" + (f".to({acc_t})" if low else ""),
               f"{ind}x = tl.where(mask, x, {ident})",
               f"{ind}y = tl.associative_scan(x, 1, _combine)"]
        if looped:
            out.append(f"{ind}y = _combine(carry, y)")
        elif s.combiner == "arith.addf":
            # ATen's sum starts from +0.0, so a running sum of -0.0s reads +0.0 there
            out.append(f"{ind}y = y + 0.0")
        for j, k in enumerate(s.results):
            if k == 0:
                val = f"y.to({B.tl_type(s.ty)})" if low else "y"
                out.append(f"{ind}tl.store(out{j}_ptr + {full_offset('out', j)}, {val}, mask=mask)")
        if looped or 1 in s.results:
            # the row's running total: the last column (masked lanes hold the identity)
            out.append(f"{ind}carry = tl.reshape(tl.reduce(tl.where(lane == BLOCK_R - 1, y, {ident}), 1, _combine), (BLOCK_P, 1))")
        return out

    if looped:
        lines.append(f"    carry = tl.full((BLOCK_P, 1), {ident}, {acc_t})")
        lines.append(f"    for start in range(0, {n_code}, BLOCK_R):")
        lines += body("        ", "start + ")
    else:
        lines += body("    ", "")
    for j, k in enumerate(s.results):
        if k == 1:
            val = f"carry.to({B.tl_type(s.ty)})" if low else "carry"
            terms = [f"c{d} * out{j}_s{i}" for i, d in enumerate(outer_dims)]
            lines.append(f"    tl.store(out{j}_ptr + {' + '.join(terms) if terms else 'rows * 0'}, {val}, mask=row_mask)")
    source = "\n".join(lines) + "\n"
    grid = sched.get("grid") or [dims.grid_entry(dims.cdiv(s.rows, block_p))]
    return KernelSource(s.name, fn, source, ranks, out_ranks, (grid[0],),
                        {"BLOCK_P": block_p, "BLOCK_R": block_r}, int(sched.get("num_warps", 4)), 1,
                        symbols=s.symbols, symbol_dims=s.symbol_dims)


def _row_coords(rank: int, dim: int, outer: list) -> tuple[list[int], dict[int, str]]:
    """rows.row_coords for sizes that may be symbolic: the same row-major split, in code."""
    if all(dims.is_static(n) for n in outer):
        return row_coords(rank, dim, outer)
    outer_dims = [d for d in range(rank) if d != dim]
    coords, rest = {}, "rows"
    for j, d in enumerate(outer_dims):
        inner = dims.prod(outer[j + 1:]) if j + 1 < len(outer) else 1
        coords[d] = f"({rest}) // {dims.code(inner)}" if inner != 1 else f"({rest})"
        if j + 1 < len(outer_dims):
            rest = f"rows % {dims.code(inner)}"
    return outer_dims, coords
