"""Contraction kernels: one tiled `tl.dot` per kernel, with its producers and epilogue fused.

A kernel of kind "contraction" (docs/kernels.md §3) holds exactly one `linalg.generic` with
reduction iterators whose body is `out + x * y`, where `x` and `y` are expressions of the
generic's inputs (plain loads, `arith.extf` of 16-bit loads, or a pointwise prologue that
`linalg-fuse-elementwise-ops` fused into the contraction, e.g. LayerNorm or bias+GELU feeding a
matmul). Around it: pointwise generics feeding its operands (transposes, broadcasts: folded into
the load addresses), a fill or any pointwise value initialising the accumulator (zero, a bias
broadcast), and pointwise generics over its output (the epilogue: bias, activation, residual,
scale, cast) applied to the accumulator in registers before the single store of every kernel
result.

The loop dimensions of the contraction are classified by where they occur:

    batch  parallel, used by x and y      -> grid axis 1 (scalar indices)
    M      parallel, used by x only       -> rows of the tile (BLOCK_M)
    N      parallel, used by y only       -> columns of the tile (BLOCK_N)
    K      reduction, used by x and y     -> the loop (BLOCK_K)

Several dimensions of one class are flattened (row-major, sizes baked in), which makes the same
template a matmul, a batch matmul, a matmul over a multi-dimensional reduction, and an implicit-GEMM
convolution (M = N·OH·OW, N = F, K = C·KH·KW: the input map `d2 * stride + d5 * dilation` is just an
affine address). Loads use the tensors' runtime element strides, so transposed/permuted operands are
read in place. Every index is an affine combination of loop dimensions (`Lin`); a value is
evaluated at such an index in one of four contexts: "a" (an x tile [BLOCK_M, BLOCK_K]), "b" (a y
tile [BLOCK_K, BLOCK_N]), "init" and "e" (output tiles [BLOCK_M, BLOCK_N], before and after the
K loop). Values of "a"/"b" that do not depend on K are computed once, before the loop.

Accumulation is fp32 (fp64 for fp64 operands); fp32 dots use `input_precision="ieee"`; f16/bf16
operands go to `tl.dot` as they are with an fp32 accumulator (the interpreter cannot multiply
bf16, so the "interpret" target widens bf16 tiles to fp32 first: products of 16-bit floats are
exact in fp32, so the result is the same).

`choose_schedule` returns {block_m, block_n, block_k, group_m, num_warps, num_stages, looped,
grid}; a `uniorch.schedule` with these keys recorded on the kernel is honoured by the generator.
`supports(op)` tells fusion whether one generic fits the template. Scalar body ops are translated
by body.py (shared with the generic code generator).

Anything outside this shape raises CodegenError; a kernel is never emitted on a guess.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
from torch_mlir import ir

from . import body as _body
from .source import CodegenError, KernelSource

# ----------------------------------------------------------------------------------------------
# types

_TL = {
    "f32": "tl.float32", "f16": "tl.float16", "bf16": "tl.bfloat16", "f64": "tl.float64",
    "i1": "tl.int1", "i8": "tl.int8", "i16": "tl.int16", "i32": "tl.int32", "i64": "tl.int64",
    "index": "tl.int32",
}
_PTR = {
    "f32": "*fp32", "f16": "*fp16", "bf16": "*bf16", "f64": "*fp64",
    "i1": "*i1", "i8": "*i8", "i16": "*i16", "i32": "*i32", "i64": "*i64",
}
_FLOATS = ("f16", "bf16", "f32", "f64")
_NP = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "bf16": np.float32,
       "i1": np.bool_, "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "index": np.int64}


def _is_float(ty: str) -> bool:
    return ty in _FLOATS


# ----------------------------------------------------------------------------------------------
# affine index expressions over the contraction's loop dimensions


@dataclass(frozen=True)
class Lin:
    """sum(coeff * d_dim) + const, dimensions of the contraction's iteration domain."""

    terms: tuple = ()  # sorted ((dim, coeff), ...), coeff != 0
    const: int = 0

    @staticmethod
    def dim(d: int) -> "Lin":
        return Lin(((d, 1),), 0)

    @staticmethod
    def cst(c: int) -> "Lin":
        return Lin((), int(c))

    def __add__(self, other: "Lin") -> "Lin":
        acc = dict(self.terms)
        for d, c in other.terms:
            acc[d] = acc.get(d, 0) + c
        return Lin(tuple(sorted((d, c) for d, c in acc.items() if c != 0)), self.const + other.const)

    def scale(self, k: int) -> "Lin":
        if k == 0:
            return Lin.cst(0)
        return Lin(tuple((d, c * k) for d, c in self.terms), self.const * k)

    def dims(self) -> set:
        return {d for d, _ in self.terms}

    def is_const(self) -> bool:
        return not self.terms


def _maps(op) -> list:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op.attributes["indexing_maps"])]


def _iterators(op) -> list[str]:
    return ["reduction" if "reduction" in str(a) else "parallel" for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def _lin(expr, env: list, op) -> Lin:
    """An affine expression of a generic's loop dims, with `env[d]` the Lin of loop dim d."""
    e = expr.maybe_downcast()
    if isinstance(e, ir.AffineDimExpr):
        if env[e.position] is None:
            raise CodegenError(op, f"loop dimension d{e.position} is not tied to the contraction's domain")
        return env[e.position]
    if isinstance(e, ir.AffineConstantExpr):
        return Lin.cst(e.value)
    if isinstance(e, ir.AffineAddExpr):
        return _lin(e.lhs, env, op) + _lin(e.rhs, env, op)
    if isinstance(e, ir.AffineMulExpr):
        lhs, rhs = _lin(e.lhs, env, op), _lin(e.rhs, env, op)
        if rhs.is_const():
            return lhs.scale(rhs.const)
        if lhs.is_const():
            return rhs.scale(lhs.const)
    raise CodegenError(op, f"indexing expression '{expr}' is not a sum of scaled dimensions")


def _dims_of(mp) -> set:
    """Loop dims an affine map reads."""
    out = set()

    def visit(expr):
        e = expr.maybe_downcast()
        if isinstance(e, ir.AffineDimExpr):
            out.add(e.position)
        elif isinstance(e, ir.AffineBinaryExpr):
            visit(e.lhs)
            visit(e.rhs)

    for r in mp.results:
        visit(r)
    return out


def _dim_pos(expr):
    e = expr.maybe_downcast()
    return e.position if isinstance(e, ir.AffineDimExpr) else None


def _const_of(expr):
    e = expr.maybe_downcast()
    return e.value if isinstance(e, ir.AffineConstantExpr) else None


# ----------------------------------------------------------------------------------------------
# IR helpers


def _as_op(x):
    return getattr(x, "operation", x)


def _producer(value):
    """The Operation defining `value`, or None for a block argument."""
    owner = value.owner
    if isinstance(owner, ir.Block):
        return None
    return _as_op(owner)


def _shape(value) -> list[int]:
    t = ir.ShapedType(value.type)
    if not t.has_static_shape:
        raise CodegenError(_producer(value), "dynamic shapes are not supported")
    return list(t.shape)


def _elem(value) -> str:
    t = value.type
    if isinstance(t, ir.ShapedType):
        return str(t.element_type)
    return str(t)


def _is_shaped(value) -> bool:
    return isinstance(value.type, ir.ShapedType)


def _loc(op) -> str:
    return str(op.location)


def _lit(value, ty: str) -> str:
    """Python literal text for a compile-time scalar of MLIR type `ty`."""
    if ty == "i1":
        return "True" if bool(value) else "False"
    if not _is_float(ty):
        return str(int(value))
    v = float(value)
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return 'float("inf")' if v > 0 else 'float("-inf")'
    return repr(v)


def _round(value, ty: str):
    """`value` rounded to MLIR type `ty` (compile-time constant folding)."""
    if ty == "i1":
        return bool(value)
    if ty == "bf16":
        import torch

        return float(torch.tensor(float(value), dtype=torch.float32).to(torch.bfloat16).float())
    if _is_float(ty):
        with np.errstate(all="ignore"):
            return float(_NP[ty](value))
    bits = {"i8": 8, "i16": 16, "i32": 32, "i64": 64, "index": 64}.get(ty, 64)
    v = int(value) & ((1 << bits) - 1)
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def _const_value(op):
    """Python value of a scalar arith.constant."""
    attr = op.attributes["value"]
    ty = str(op.results[0].type)
    if _is_float(ty):
        return ir.FloatAttr(attr).value
    if ty == "i1":
        return bool(ir.IntegerAttr(attr).value)
    return ir.IntegerAttr(attr).value


# ----------------------------------------------------------------------------------------------
# analysis


@dataclass
class _Plan:
    func: object
    name: str
    args: list
    results: list
    gen: object                    # the contraction generic
    maps: list
    n_in: int
    sizes: list[int]               # per loop dim of the contraction
    cls: dict                      # loop dim -> "b" | "m" | "n" | "k" | "u" (size 1)
    order: dict                    # class -> [dims, outer to inner]
    x: object                      # body value multiplied on the A side ([M, K])
    y: object                      # body value on the B side ([K, N])
    acc_layout: tuple              # Lin per dim of the contraction's result
    layouts: dict = field(default_factory=dict)   # value -> Lin per tensor dim (output-domain values)
    dot_types: tuple = ("f32", "f32")

    def extent(self, c: str) -> int:
        return int(np.prod([self.sizes[d] for d in self.order[c]], dtype=np.int64)) if self.order[c] else 1

    @property
    def M(self):
        return self.extent("m")

    @property
    def N(self):
        return self.extent("n")

    @property
    def K(self):
        return self.extent("k")

    @property
    def B(self):
        return self.extent("b")


_ALLOWED_OUTSIDE = ("arith.constant", "tensor.empty", "linalg.generic", "func.return")
_KNOWN_BODY_OPS = set(_body.TABLE) | {"arith.cmpf", "arith.cmpi", "math.fpowi", "math.ipowi", "arith.constant",
                                      "linalg.index"}


def _classify(gen) -> dict:
    """Roles of a contraction generic's loops and factors (raises CodegenError if it is none)."""
    if gen.name != "linalg.generic" or "reduction" not in _iterators(gen):
        raise CodegenError(gen, "not a linalg.generic with reduction loops")
    view = gen.opview
    n_in, n_out = len(view.inputs), len(view.outputs)
    if n_out != 1:
        raise CodegenError(gen, "contraction with several outputs")
    maps = _maps(gen)
    iters = _iterators(gen)
    operands = list(view.inputs) + list(view.outputs)
    for v in operands:
        if _is_shaped(v):
            _shape(v)
    every = [Lin.dim(d) for d in range(len(iters))]
    for mp in maps:  # every index must be a sum of scaled loop dims (no mod/floordiv/symbols)
        for e in mp.results:
            _lin(e, every, gen)
    res_ty = _elem(gen.results[0])
    if not _is_float(res_ty):
        raise CodegenError(gen, f"contraction over {res_ty} (only floating point is supported)")

    # loop sizes from the operands' shapes
    n_loops = len(iters)
    sizes = [None] * n_loops
    for v, mp in zip(operands, maps):
        if not _is_shaped(v):
            continue
        for j, e in enumerate(mp.results):
            d = _dim_pos(e)
            if d is not None:
                s = _shape(v)[j]
                if sizes[d] is not None and sizes[d] != s:
                    raise CodegenError(gen, f"loop d{d} has two extents ({sizes[d]}, {s})")
                sizes[d] = s
    if any(s is None for s in sizes):
        raise CodegenError(gen, "a loop dimension's extent is not given by any operand")
    if any(s == 0 for s in sizes):
        raise CodegenError(gen, "empty iteration domain")

    # body: yield(out + x * y)
    body = gen.regions[0].blocks[0]
    bargs = list(body.arguments)
    out_arg = bargs[n_in]
    yop = _as_op(list(body.operations)[-1])
    if len(yop.operands) != 1:
        raise CodegenError(gen, "contraction body must yield one value")
    add = _producer(yop.operands[0])
    if add is None or add.name != "arith.addf":
        raise CodegenError(gen, "contraction body is not 'out + x * y' (arith.addf)")
    a0, a1 = add.operands
    if a0 == out_arg:
        prod = a1
    elif a1 == out_arg:
        prod = a0
    else:
        raise CodegenError(gen, "contraction body does not accumulate into its output")
    mul = _producer(prod)
    if mul is None or mul.name != "arith.mulf":
        raise CodegenError(gen, "contraction body is not 'out + x * y' (arith.mulf)")
    x, y = mul.operands
    body_ops = [_as_op(o) for o in body.operations]

    def deps(v):
        """(block arg numbers, linalg.index dims) an in-body value depends on."""
        args_used, idx_used = set(), set()
        stack, seen = [v], []
        while stack:
            w = stack.pop()
            if any(w == s for s in seen):
                continue
            seen.append(w)
            if isinstance(w.owner, ir.Block):
                if w.owner == body:
                    args_used.add(ir.BlockArgument(w).arg_number)
                    continue
                raise CodegenError(gen, "contraction body uses a value of another block")
            p = _as_op(w.owner)
            if not any(p == b for b in body_ops):
                if p.name != "arith.constant":
                    raise CodegenError(p, "contraction body uses a non-constant value from outside")
                continue
            if p.name == "linalg.index":
                idx_used.add(ir.IntegerAttr(p.attributes["dim"]).value)
            stack.extend(p.operands)
        return args_used, idx_used

    xa, xi = deps(x)
    ya, yi = deps(y)
    if n_in in xa or n_in in ya:
        raise CodegenError(gen, "contraction body reads its accumulator outside 'out + x * y'")
    uses_out = sum(1 for o in body_ops for v in o.operands if v == out_arg)
    if uses_out != 1:
        raise CodegenError(gen, "contraction body reads its accumulator more than once")
    dims_x = set(xi).union(*[_dims_of(maps[i]) for i in xa]) if xa or xi else set()
    dims_y = set(yi).union(*[_dims_of(maps[i]) for i in ya]) if ya or yi else set()

    # output map: a permutation of the parallel dims (size-1 dims may be constant 0)
    out_map = maps[n_in]
    out_dims = []
    for e in out_map.results:
        d = _dim_pos(e)
        if d is None:
            if _const_of(e) == 0:
                continue
            raise CodegenError(gen, f"contraction output map {out_map} is not a projection")
        out_dims.append(d)
    if len(set(out_dims)) != len(out_dims):
        raise CodegenError(gen, f"contraction output map {out_map} repeats a dimension")

    cls = {}
    for d in range(n_loops):
        par = iters[d] == "parallel"
        if sizes[d] == 1:
            cls[d] = "u"
            continue
        in_x, in_y = d in dims_x, d in dims_y
        if par:
            if d not in out_dims:
                raise CodegenError(gen, f"parallel loop d{d} does not index the output")
            cls[d] = "b" if (in_x and in_y) else ("n" if in_y else "m")
        else:
            if d in out_dims:
                raise CodegenError(gen, f"reduction loop d{d} indexes the output")
            if not (in_x and in_y):
                raise CodegenError(gen, f"reduction loop d{d} is not shared by both factors (not a contraction)")
            cls[d] = "k"

    # Put the output's innermost dimension on the N side (coalesced stores).
    inner = [d for d in out_dims if cls[d] != "u"]
    if inner and cls[inner[-1]] == "m":
        x, y = y, x
        cls = {d: {"m": "n", "n": "m"}.get(c, c) for d, c in cls.items()}

    if not any(iters[d] == "parallel" and (d in dims_x) != (d in dims_y) for d in range(n_loops)):
        # e.g. a variance sum((x - mean)^2): every output dim is read by both factors
        raise CodegenError(gen, "no M or N dimension: a (batched) dot product is a plain reduction, not a tl.dot")
    order = {
        "b": [d for d in out_dims if cls[d] == "b"],
        "m": [d for d in out_dims if cls[d] == "m"],
        "n": [d for d in out_dims if cls[d] == "n"],
        "k": [d for d in range(n_loops) if cls[d] == "k"],
    }
    env = [Lin.cst(0) if cls[d] == "u" else Lin.dim(d) for d in range(n_loops)]
    acc_layout = tuple(_lin(e, env, gen) for e in out_map.results)
    batch = int(np.prod([sizes[d] for d in order["b"]], dtype=np.int64))
    if batch > 65535:
        raise CodegenError(gen, f"batch extent {batch} exceeds the grid's second axis")

    # dot operand types (16-bit operands widened by arith.extf go to tl.dot as they are)
    def dot_type(v):
        p = _producer(v)
        if p is not None and p.name == "arith.extf" and str(p.operands[0].type) in ("f16", "bf16"):
            return str(p.operands[0].type)
        return str(v.type)

    dot_types = (dot_type(x), dot_type(y))
    for t in dot_types + (str(x.type), str(y.type)):
        if not _is_float(t):
            raise CodegenError(gen, f"contraction factor of type {t} (only floating point is supported)")
    for o in body_ops[:-1]:
        if o.name not in _KNOWN_BODY_OPS:
            raise CodegenError(o, "op not supported in a contraction body")
    return dict(gen=gen, maps=maps, n_in=n_in, sizes=sizes, cls=cls, order=order, x=x, y=y,
                acc_layout=acc_layout, dot_types=dot_types)



def supports(op) -> bool:
    """Whether `op` is a contraction generic this template takes: body `out + x * y` with x and y
    any pointwise expressions of the inputs, every loop batch / M / N / K (see the module doc);
    covers matmuls with permuted operands, batch matmuls, multi-dim reductions and convolutions
    (affine `d * stride + k * dilation` input maps). Fusion can use it to group such ops."""
    try:
        _classify(_as_op(op))
        return True
    except (CodegenError, ValueError, KeyError):
        return False


def _analyze(kernel) -> _Plan:
    func = _as_op(kernel)
    name = ir.StringAttr(func.attributes["sym_name"]).value
    block = func.regions[0].blocks[0]
    args = list(block.arguments)
    ops = [_as_op(o) for o in block.operations]
    ret = ops[-1]
    if ret.name != "func.return":
        raise CodegenError(ret, "kernel body does not end in func.return")
    for a in args:
        if not _is_shaped(a):
            raise CodegenError(func, "kernel arguments must be tensors")
        _shape(a)
    for op in ops:
        if op.name in ("tensor.expand_shape", "tensor.collapse_shape") and _is_empty(op.operands[0]):
            continue  # a reshaped tensor.empty: still only a shape (e.g. the outs of a fill)
        if op.name not in _ALLOWED_OUTSIDE:
            raise CodegenError(op, "op not supported inside a contraction kernel")
        if op.name == "arith.constant" and _is_shaped(op.results[0]):
            raise CodegenError(op, "tensor constants inside a contraction kernel are not supported")
    gens = [op for op in ops if op.name == "linalg.generic"]
    contr = [op for op in gens if "reduction" in _iterators(op)]
    if len(contr) != 1:
        raise CodegenError(contr[1] if contr else func,
                           f"a contraction kernel needs exactly one reduction generic, found {len(contr)}")
    gen = contr[0]
    plan = _Plan(func, name, args, list(ret.operands), **_classify(gen))
    # output-domain values: the contraction result and the pointwise generics built on it
    layouts = {gen.results[0]: plan.acc_layout}
    after = False
    for op in ops:
        if op == gen:
            after = True
            continue
        if not after or op.name != "linalg.generic":
            continue
        gview = op.opview
        g_ops = list(gview.inputs) + list(gview.outputs)
        g_maps = _maps(op)
        chain = [(v, mp) for v, mp in zip(g_ops, g_maps) if _is_shaped(v) and _known(layouts, v)]
        if not chain:
            continue
        if "reduction" in _iterators(op):
            raise CodegenError(op, "a reduction over the contraction's result cannot be fused as an epilogue")
        g_env = [None] * len(_iterators(op))
        for v, mp in chain:
            lay = _get(layouts, v)
            for j, e in enumerate(mp.results):
                d = _dim_pos(e)
                if d is None:
                    if _const_of(e) is not None and lay[j].is_const():
                        continue
                    raise CodegenError(op, f"epilogue reads the contraction result through {mp}")
                if g_env[d] is None:
                    g_env[d] = lay[j]
                elif g_env[d] != lay[j]:
                    raise CodegenError(op, "epilogue reads the contraction result at two different positions")
        loop_shape = _loop_sizes(op)
        for d, s in enumerate(loop_shape):
            if g_env[d] is None:
                if s != 1:
                    raise CodegenError(op, f"epilogue broadcasts the contraction result along loop d{d}")
                g_env[d] = Lin.cst(0)
        for r, res in enumerate(op.results):
            layouts[res] = tuple(_lin(e, g_env, op) for e in g_maps[len(gview.inputs) + r].results)
    plan.layouts = layouts

    want = sorted(d for d, c in plan.cls.items() if c in "bmn")
    acc_shape = _shape(gen.results[0])
    for r in plan.results:
        if not _known(layouts, r) and _shape(r) == acc_shape:
            # a kernel value not derived from the product (e.g. a fill also used outside) with the
            # output's shape: computed and stored elementwise over the same tiles
            layouts[r] = plan.acc_layout
        if not _known(layouts, r):
            raise CodegenError(_producer(r) or func, "kernel result is not computed over the contraction's output")
        lay = _get(layouts, r)
        got = sorted(d for lin in lay for d in lin.dims())
        if got != want or any(not (lin.is_const() or (len(lin.terms) == 1 and lin.terms[0][1] == 1)) for lin in lay):
            raise CodegenError(_producer(r) or func, "kernel result does not cover the contraction's output exactly once")
    return plan


def _is_empty(v) -> bool:
    """Whether `v` is a tensor.empty, possibly reshaped."""
    p = _producer(v)
    while p is not None and p.name in ("tensor.expand_shape", "tensor.collapse_shape"):
        p = _producer(p.operands[0])
    return p is not None and p.name == "tensor.empty"


def _known(layouts: dict, v) -> bool:
    return any(v == k for k in layouts)


def _get(layouts: dict, v):
    for k, lay in layouts.items():
        if v == k:
            return lay
    raise KeyError(v)


def _loop_sizes(op) -> list[int]:
    view = op.opview
    n = len(_iterators(op))
    sizes = [None] * n
    for v, mp in zip(list(view.inputs) + list(view.outputs), _maps(op)):
        if not _is_shaped(v):
            continue
        shp = _shape(v)
        for j, e in enumerate(mp.results):
            d = _dim_pos(e)
            if d is not None:
                sizes[d] = shp[j]
    if any(s is None for s in sizes):
        raise CodegenError(op, "a loop dimension's extent is not given by any operand")
    return sizes


# ----------------------------------------------------------------------------------------------
# schedule


def _target_kind(target) -> tuple[str, int]:
    """("interpret" | "cuda" | "rocm", warp width) of a target string `vendor[:arch]`."""
    from uniorch.targets import TargetError, parse_target

    try:
        t = parse_target(target or "interpret")
    except TargetError:
        text = str(target).lower()
        if text.startswith("interp"):
            return "interpret", 32
        amd = any(k in text for k in ("rocm", "hip", "amd", "gfx"))
        return ("rocm", 64) if amd else ("cuda", 32)
    if t.interpret:
        return "interpret", t.warp_size
    return ("rocm" if t.vendor == "rocm" else "cuda"), t.warp_size


def _pow2(n: int) -> int:
    return 1 << max(0, int(n - 1).bit_length())


def _fit(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, _pow2(n)))


def _schedule(plan: _Plan, target: str) -> dict:
    kind, warp = _target_kind(target)
    M, N, K = plan.M, plan.N, plan.K
    narrow = all(t in ("f16", "bf16") for t in plan.dot_types)
    if kind == "interpret":
        # Few, mid-sized programs: the interpreter's cost is per program and per op, not per element.
        bm, bn, bk = _fit(M, 16, 64), _fit(N, 16, 64), _fit(K, 16, 64)
        warps, stages, group = 4, 1, 1
    else:
        if narrow:   # tensor cores / matrix cores: up to 128x128x64 tiles
            bm, bn, bk = _fit(M, 16, 128), _fit(N, 16, 128), _fit(K, 16, 64)
        else:        # fp32 "ieee" (and fp64) dots run on FMA units: smaller tiles
            bm, bn, bk = _fit(M, 16, 64), _fit(N, 16, 64), _fit(K, 16, 32)
        # threads per program by tile area; warps of 32 (NVIDIA) or wavefronts of 64 (AMD)
        area = bm * bn
        threads = 256 if area >= 128 * 128 else 128 if area >= 64 * 64 else 64 if area >= 32 * 32 else 32
        warps = max(1, threads // warp)
        # NVIDIA: cp.async/TMA multi-stage pipeline; AMD's stream pipeliner wants 2 stages
        stages = 2 if kind == "rocm" else 3
        group = 8
    tiles = -(-M // bm) * -(-N // bn)
    return {
        "block_m": bm, "block_n": bn, "block_k": bk, "group_m": group,
        "num_warps": warps, "num_stages": stages, "looped": True,
        "grid": [tiles, plan.B, 1],
    }


def choose_schedule(kernel, target: str) -> dict:
    """Tile sizes, warps, stages and grid of a contraction kernel for `target`
    ("interpret", "cuda", "rocm")."""
    return _schedule(_analyze(kernel), target)


def _recorded_schedule(func, plan: _Plan, target: str) -> dict:
    """The kernel's `uniorch.schedule` (if uniorch-schedule recorded one for this template)."""
    if "uniorch.schedule" not in func.attributes:
        return _schedule(plan, target)
    attr = ir.DictAttr(func.attributes["uniorch.schedule"])
    keys = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages")
    if not all(k in attr for k in keys):
        return _schedule(plan, target)
    s = {k: ir.IntegerAttr(attr[k]).value for k in keys}
    for k in ("block_m", "block_n", "block_k"):
        if s[k] < 16 or s[k] & (s[k] - 1):
            raise CodegenError(func, f"schedule {k} = {s[k]} (tl.dot needs a power of two >= 16)")
    s["grid"] = [-(-plan.M // s["block_m"]) * -(-plan.N // s["block_n"]), plan.B, 1]
    return s


# ----------------------------------------------------------------------------------------------
# emission


@dataclass
class _Val:
    text: str
    ty: str                      # MLIR scalar type
    cls: frozenset = frozenset()  # tile axes it varies along: "m", "n", "k"
    const: object = None         # compile-time value, if any
    zero_k: bool = False         # zero outside the K extent (masked load, other=0)


class _Emitter:
    def __init__(self, plan: _Plan, sched: dict, target: str):
        self.p = plan
        self.s = sched
        self.interpret = _target_kind(target)[0] == "interpret"
        self.pre: list[str] = []    # before the K loop
        self.loop: list[str] = []   # inside the K loop
        self.post: list[str] = []   # after the K loop
        self.need: set[str] = set()
        self.memo: list = []        # [(value, idx, ctx, _Val)]
        self.count: dict[str, int] = {}
        self.frames: list[dict] = []   # fused ops being emitted: their header comment, location
        self.last_loc: dict[int, str] = {}
        self.pos = {}
        for c in "bmnk":
            for i, d in enumerate(plan.order[c]):
                self.pos[d] = i
        self.mask_m = plan.M % sched["block_m"] != 0
        self.mask_n = plan.N % sched["block_n"] != 0
        self.mask_k = plan.K % sched["block_k"] != 0

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
        return name

    def lin_text(self, lin: Lin, ctx: str) -> str:
        parts = []
        for d, c in lin.terms:
            n = self.dim_name(d, ctx)
            parts.append(n if c == 1 else f"{n} * {c}")
        if lin.const or not parts:
            parts.append(str(lin.const))
        return " + ".join(parts)

    def lin_cls(self, lin: Lin) -> set:
        return {self.p.cls[d] for d in lin.dims()} & {"m", "n", "k"}

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
        for mv, midx, mctx, val in self.memo:
            if mctx == ctx and midx == idx and mv == v:
                return val
        val = self._value(v, idx, ctx)
        self.memo.append((v, idx, ctx, val))
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
        if op == p.gen:
            if ctx != "e" or idx != p.acc_layout:
                raise CodegenError(op, "the contraction result is read at a position other than the one computed")
            ty = _elem(v)
            text = "acc" if ty == self.acc_ty else f"acc.to({_TL[ty]})"
            name = self.line("e", {"m", "n"}, text, "c")
            return _Val(name, ty, frozenset({"m", "n"}))
        if op.name == "linalg.generic":
            return self.generic(op, ir.OpResult(v).result_number, idx, ctx)
        if _is_empty(v):
            raise CodegenError(op, "reads an uninitialised tensor (tensor.empty)")
        raise CodegenError(op, "op not supported inside a contraction kernel")

    def load(self, i: int, idx: tuple, ctx: str) -> _Val:
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
        m = self.mask(cls, ctx)
        other = "0.0" if _is_float(ty) else "0"
        text = f"tl.load({addr}, mask={m}, other={other})" if m else f"tl.load({addr})"
        name = self.line(ctx, cls, text, f"{ctx}_in{i}_")
        return _Val(name, ty, frozenset(cls), zero_k=("k" in cls and m is not None and "mask_k" in m))

    def scalar(self, v, op) -> _Val:
        p = _producer(v)
        if p is None or p.name != "arith.constant":
            raise CodegenError(op, "scalar operand that is not a constant")
        ty = str(v.type)
        c = _round(_const_value(p), ty)
        return _Val(_lit(c, ty), ty, frozenset(), const=c)

    def generic(self, op, result_no: int, idx: tuple, ctx: str) -> _Val:
        """A pointwise generic's result at `idx`: evaluate its body there."""
        if "reduction" in _iterators(op):
            raise CodegenError(op, "a second reduction inside a contraction kernel")
        view = op.opview
        n_in = len(view.inputs)
        maps = _maps(op)
        sizes = _loop_sizes(op)
        env = [None] * len(sizes)
        for j, e in enumerate(maps[n_in + result_no].results):
            d = _dim_pos(e)
            if d is None:
                raise CodegenError(op, "pointwise generic with a non-projected output map")
            env[d] = idx[j]
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
                raise CodegenError(op, "body uses a block argument of another region")
            val = arg(ir.BlockArgument(v).arg_number)
        else:
            d = _as_op(owner)
            if not any(d == b for b in body_ops):
                if d.name != "arith.constant" or _is_shaped(v):
                    raise CodegenError(d, "body uses a non-constant value defined outside it")
                ty = str(v.type)
                c = _round(_const_value(d), ty)
                val = _Val(_lit(c, ty), ty, frozenset(), const=c)
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

    def operand(self, side: str) -> _Val:
        """The [BLOCK_M, BLOCK_K] (side "a") or [BLOCK_K, BLOCK_N] (side "b") dot operand."""
        p = self.p
        v = p.x if side == "a" else p.y
        dot_ty = p.dot_types[0 if side == "a" else 1]
        strip = dot_ty != str(v.type)
        if strip:
            v = _producer(v).operands[0]
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
        shape = "(BLOCK_M, BLOCK_K)" if side == "a" else "(BLOCK_K, BLOCK_N)"
        full = {"m", "k"} if side == "a" else {"k", "n"}
        text, ty = val.text, val.ty
        if val.const is not None:
            text = self.line(side, {"k"}, f"tl.full({shape}, {text}, {_TL[ty]})", side)
        elif set(val.cls) != full:
            text = self.line(side, {"k"}, f"tl.broadcast_to({text}, {shape})", side)
        if self.interpret and ty == "bf16":
            # the interpreter keeps bf16 as raw bits (no bf16 dot or arithmetic): widen first
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
        a = self.operand("a")
        b = self.operand("b")
        # operand types for tl.dot
        if wide_acc:
            dt = "f64"
        elif ta == tb and ta in ("f16", "bf16") and not (self.interpret and ta == "bf16"):
            dt = ta
        else:
            dt = "f32"
        at = a.text if a.ty == dt else self.line("a", {"k"}, f"{a.text}.to({_TL[dt]})", "a")
        bt = b.text if b.ty == dt else self.line("b", {"k"}, f"{b.text}.to({_TL[dt]})", "b")
        prec = ', input_precision="ieee"' if dt in ("f32", "f64") else ""

        # accumulator init from the contraction's outs operand
        outs = p.gen.opview.outputs[0]
        init = self.value(outs, p.acc_layout, "init")
        if init.const is not None:
            acc_line = f"acc = tl.full((BLOCK_M, BLOCK_N), {_lit(init.const, self.acc_ty)}, {acc_tl})"
        else:
            t = init.text if init.ty == self.acc_ty else f"{init.text}.to({acc_tl})"
            acc_line = (f"acc = {t}" if set(init.cls) == {"m", "n"}
                        else f"acc = tl.broadcast_to({t}, (BLOCK_M, BLOCK_N))")
        self.pre.append(f"# accumulator: outs of the contraction at {_loc(p.gen)}")
        self.pre.append(acc_line)
        self.loop.append(f"acc = tl.dot({at}, {bt}, acc{prec})")

        # results, in the output domain
        stores = []
        for r, res in enumerate(p.results):
            lay = _get(p.layouts, res)
            val = self.value(res, lay, "e")
            ty = _elem(res)
            if ty not in _PTR:
                raise CodegenError(_producer(res), f"kernel result of element type {ty}")
            text = val.text
            if val.const is not None:
                text = f"tl.full((BLOCK_M, BLOCK_N), {_lit(_round(val.const, ty), ty)}, {_TL[ty]})"
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
            if set().union(*[self.lin_cls(lin) for lin in lay]) != {"m", "n"}:
                # M or N is a single element: every row/column of the tile maps to one address (masked)
                addr = f"tl.broadcast_to({addr}, (BLOCK_M, BLOCK_N))"
            m = self.mask({"m", "n"}, "e")
            prod = _producer(res)
            where = _loc(prod) if prod is not None else ""
            stores.append(f"# result {r} ({_elem(res)} {_shape(res)}) at {where}")
            stores.append(f"tl.store({addr}, {text}, mask={m})" if m else f"tl.store({addr}, {text})")
        return self.assemble(stores)

    def assemble(self, stores: list[str]) -> KernelSource:
        p, s = self.p, self.s
        fn = re.sub(r"\W", "_", p.name)
        if not fn or fn[0].isdigit():
            fn = "k_" + fn
        in_ranks = [len(_shape(a)) for a in p.args]
        out_ranks = [len(_shape(r)) for r in p.results]
        params = []
        for prefix, ranks in (("in", in_ranks), ("out", out_ranks)):
            for i, rank in enumerate(ranks):
                params.append(f"{prefix}{i}_ptr")
                params.extend(f"{prefix}{i}_s{d}" for d in range(rank))
        M, N, K, B = p.M, p.N, p.K, p.B
        bm, bn = s["block_m"], s["block_n"]
        tiles_m, tiles_n = -(-M // bm), -(-N // bn)
        swizzle = s["group_m"] > 1 and tiles_m > 1 and tiles_n > 1
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
                f"num_pid_m = ({M} + BLOCK_M - 1) // BLOCK_M",
                f"num_pid_n = ({N} + BLOCK_N - 1) // BLOCK_N",
                "# grouped ordering: GROUP_M row-tiles share their B tiles in L2",
                "group_id = pid // (GROUP_M * num_pid_n)",
                "first_pid_m = group_id * GROUP_M",
                "group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)",
                "pid_m = first_pid_m + (pid % (GROUP_M * num_pid_n)) % group_size_m",
                "pid_n = (pid % (GROUP_M * num_pid_n)) // group_size_m",
            ]
        elif tiles_n == 1:
            body += ["pid_m = pid", "pid_n = 0"]
        elif tiles_m == 1:
            body += ["pid_m = 0", "pid_n = pid"]
        else:
            body += [f"pid_m = pid // (({N} + BLOCK_N - 1) // BLOCK_N)",
                     f"pid_n = pid % (({N} + BLOCK_N - 1) // BLOCK_N)"]
        body += ["offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
                 "offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)"]
        if p.order["b"]:
            body.append("pid_b = tl.program_id(1)")
        body += self.index_defs("b", "pid_b")
        body += self.index_defs("m", "offs_m[:, None]")
        body += self.index_defs("n", "offs_n[None, :]")
        if "mask_m" in self.need:
            body.append(f"mask_m = offs_m[:, None] < {M}")
        if "mask_n" in self.need:
            body.append(f"mask_n = offs_n[None, :] < {N}")
        body += self.pre
        body.append(f"for k0 in range(0, {K}, BLOCK_K):")
        inner = ["offs_k = k0 + tl.arange(0, BLOCK_K)"]
        inner += self.index_defs("k", "offs_k[None, :]", ctx="a")
        inner += self.index_defs("k", "offs_k[:, None]", ctx="b")
        if "mask_ka" in self.need:
            inner.append(f"mask_ka = offs_k[None, :] < {K}")
        if "mask_kb" in self.need:
            inner.append(f"mask_kb = offs_k[:, None] < {K}")
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
        grid = (tiles_m * tiles_n, B, 1)
        return KernelSource(
            name=p.name, fn_name=fn, source=source, input_ranks=in_ranks, output_ranks=out_ranks,
            grid=grid, constexprs=constexprs, num_warps=s["num_warps"], num_stages=s["num_stages"],
            pointer_types=ptypes,
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
            inner = int(np.prod([p.sizes[e] for e in dims[i + 1:]], dtype=np.int64)) if i + 1 < len(dims) else 1
            text = flat if inner == 1 else f"{flat} // {inner}"
            if i > 0:
                text += f" % {p.sizes[d]}"
            out.append(f"{name} = {text}  # d{d} ({p.sizes[d]})")
        return out


_CASTS = ("arith.extf", "arith.truncf", "arith.sitofp", "arith.fptosi", "arith.extsi", "arith.trunci",
          "arith.index_cast")
_LITERAL_OK = {
    "arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.addi", "arith.subi", "arith.muli",
    "arith.andi", "arith.ori", "arith.xori", "arith.select", "arith.cmpf", "arith.cmpi",
    "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf", "arith.maxsi", "arith.minsi",
}


def _fold(name: str, d, ins: list[_Val], ty: str):
    """Compile-time value of an op on constants, or None."""
    if not ins or any(v.const is None for v in ins):
        return None
    c = [v.const for v in ins]
    with np.errstate(all="ignore"):
        if name in ("arith.extf", "arith.truncf", "arith.sitofp", "arith.extsi", "arith.trunci",
                    "arith.index_cast", "arith.fptosi"):
            v = c[0]
            if ins[0].ty == "i1" and name in ("arith.sitofp", "arith.extsi"):
                v = -1 if v else 0  # signed i1: true is -1
            if name == "arith.fptosi":
                if not math.isfinite(v):
                    return None
                v = math.trunc(v)
            return _round(v, ty)
        if _is_float(ty) and ty != "bf16":
            f = _NP[ty]
            x = [f(v) for v in c]
            ops = {"arith.addf": lambda: x[0] + x[1], "arith.subf": lambda: x[0] - x[1],
                   "arith.mulf": lambda: x[0] * x[1], "arith.divf": lambda: x[0] / x[1],
                   "arith.negf": lambda: -x[0]}
            if name in ops:
                return float(f(ops[name]()))
    return None


# ----------------------------------------------------------------------------------------------


def generate_contraction(kernel, target: str) -> KernelSource:
    """Triton source for one contraction kernel (docs/kernels.md §3-4) on `target`."""
    plan = _analyze(kernel)
    sched = _recorded_schedule(plan.func, plan, target)
    return _Emitter(plan, sched, target).build()
