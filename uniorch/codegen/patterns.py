"""What a `linalg.generic` computes, read off its maps, iterators and body.

Shared by fusion (passes/fuse.py) and the code generators: `is_contraction` decides which ops the
tl.dot template (contraction.py) takes; the rest classify pointwise ops, data movement (transposes,
broadcasts), fills, and reductions whose body folds with a known combiner.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

GENERIC = "linalg.generic"
COPY_OPS = ("tensor.insert_slice", "tensor.pad", "tensor.concat")
# Pure-dataflow glue that stays in @main (views, shapes, constants).
GLUE_OPS = ("tensor.empty", "arith.constant", "tensor.expand_shape", "tensor.collapse_shape",
            "tensor.extract_slice", "func.return")
# Body ops that make a pointwise op too expensive to recompute in several kernels.
_EXPENSIVE = ("math.", "func.call", "tensor.extract", "arith.divf", "arith.remf", "arith.divsi", "arith.remsi",
              "arith.divui", "arith.remui")
_CHEAP_MATH = ("math.absf", "math.absi", "math.floor", "math.ceil")
CHEAP_BODY_OPS = 4

# combiner op -> identity (as a Python value understood by body.constant_expr), None: dtype-dependent
COMBINERS = {
    "arith.addf": 0.0, "arith.mulf": 1.0,
    "arith.maximumf": float("-inf"), "arith.minimumf": float("inf"),
    "arith.maxnumf": float("nan"), "arith.minnumf": float("nan"),
    "arith.addi": 0, "arith.muli": 1, "arith.ori": 0, "arith.xori": 0,
    "arith.andi": "ones", "arith.maxsi": "smin", "arith.minsi": "smax",
    "arith.maxui": 0, "arith.minui": "ones",
}


# -- generic-op accessors ---------------------------------------------------------------------------
def op_of(x) -> ir.Operation:
    return x.operation if hasattr(x, "operation") else x


def value_name(v: ir.Value) -> str:
    """`%arg0`, as the IR prints it: numbered within its own function (a plain `get_name()`
    numbers the whole module on every call, quadratic in a model's layers)."""
    return v.get_name(use_local_scope=True)


def recorded_schedule(func) -> dict | None:
    """The schedule a pass recorded on a kernel (`uniorch.schedule`), as a dict; None if none."""
    attrs = op_of(func).attributes
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
            # a grid entry over symbolic sizes is its expression's text (uniorch/ir/dims.py)
            out[na.name] = [ir.IntegerAttr(x).value if isinstance(x, ir.IntegerAttr) else ir.StringAttr(x).value
                            for x in a]
        else:
            out[na.name] = str(a)
    return out


def schedule_text(func) -> dict:
    """A kernel's recorded schedule as `explain` shows it (each entry's MLIR text)."""
    attrs = op_of(func).attributes
    if "uniorch.schedule" not in attrs:
        return {}
    return {a.name: str(a.attr) for a in ir.DictAttr(attrs["uniorch.schedule"])}


FP32_DOT = "uniorch.fp32_dot"  # on a kernel: Triton's input_precision for its float32 dots


def dot_precision(func, dt: str) -> str:
    """The `input_precision` argument of a `tl.dot` over `dt` operands in kernel `func`: float32
    dots are exact ("ieee", FMA units) unless the compile recorded PyTorch's float32 matmul
    precision allowing TF32 (`uniorch.fp32_dot`); float64 ones are always exact."""
    if dt == "f64":
        return ', input_precision="ieee"'
    if dt != "f32":
        return ""
    attrs = op_of(func).attributes
    mode = ir.StringAttr(attrs[FP32_DOT]).value if FP32_DOT in attrs else "ieee"
    return f', input_precision="{mode}"'


def attention_precision(func, dt: str, target) -> str:
    """`dot_precision` for the two dots of a flash-attention kernel (q·kᵀ and P·v). On NVIDIA GPUs
    from sm_80, PyTorch runs a float32 SDPA in the memory-efficient kernel, whose CUTLASS GEMMs are
    3xTF32 on tensor cores (`OpMultiplyAddFastF32`: each float32 split into two TF32 halves, three
    products); torch.compile turns the written-out pattern into that kernel too. Exact FMA dots
    made H200 run 6's gpt2_block fp32 attention 3.4x slower than it. So float32 attention dots take
    Triton's "tf32x3" there, unless the compile recorded a precision (`uniorch.fp32_dot`: TF32 where
    PyTorch's matmul precision allows it, exact where its memory-efficient kernel is disabled)."""
    if dt != "f32" or FP32_DOT in op_of(func).attributes or not _has_tf32(target):
        return dot_precision(func, dt)
    return ', input_precision="tf32x3"'


def recomputes_probabilities(func) -> bool:
    """Whether kernel `func` computes exp(s - m) with m a row statistic read from memory (a
    tensor with a unit dim where the result has none): an attention backward's probabilities
    recomputed from the saved log-sum-exp, in the chains that compute dq, dk and dv. Those are
    the backward of a fused attention (PyTorch's memory-efficient kernel, or the one torch.compile
    rewrites the written-out pattern to), so their float32 dots take the attention's precision."""
    for op in op_of(func).regions[0].blocks[0].operations:
        op = op_of(op)
        if not is_generic(op):
            continue
        blk = body(op)
        ins, maps = inputs(op), indexing_maps(op)
        out_shape = ir.ShapedType(op.results[0].type).shape if op.results else []
        for o in body_ops(op):
            if o.name != "math.exp" or isinstance(o.operands[0].owner, ir.Block):
                continue
            sub = op_of(o.operands[0].owner)
            if sub.name != "arith.subf" or not isinstance(sub.operands[1].owner, ir.Block):
                continue
            k = list(blk.arguments).index(sub.operands[1]) if sub.operands[1] in list(blk.arguments) else -1
            if 0 <= k < len(ins) and isinstance(ins[k].type, ir.ShapedType):
                res = maps[k].results
                if any(isinstance(e, ir.AffineConstantExpr) for e in res) or len(res) < len(out_shape):
                    return True
    return False


def _has_tf32(target) -> bool:
    from uniorch.targets import TargetError, parse_target

    try:
        return parse_target(target or "interpret").has_tf32
    except TargetError:
        return False


def exact_fp32(func, dot_types) -> bool:
    """Whether a kernel's dots over `dot_types` are exact float32 ones, which run on FMA units."""
    return all(t == "f32" for t in dot_types) and "ieee" in dot_precision(func, "f32")


def is_generic(op) -> bool:
    return op_of(op).name == GENERIC


def iterator_types(op) -> list[str]:
    # the array printed once, "[#linalg.iterator_type<parallel>, ...]", and memoized: the fusion
    # passes ask thousands of times per model, each element's own print was most of the cost
    text = str(op_of(op).attributes["iterator_types"])
    out = _ITERATORS.get(text)
    if out is None:
        parts = text.strip("[] ").split(",") if text.strip("[] ") else []
        out = _ITERATORS[text] = tuple("reduction" if "reduction" in p else "parallel" for p in parts)
    return list(out)


_ITERATORS: dict[str, tuple] = {}


def indexing_maps(op) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(a).value for a in ir.ArrayAttr(op_of(op).attributes["indexing_maps"])]


def num_inputs(op) -> int:
    seg = op_of(op).attributes["operandSegmentSizes"]
    return list(ir.DenseI32ArrayAttr(seg))[0]


def inputs(op) -> list[ir.Value]:
    o = op_of(op)
    return list(o.operands)[: num_inputs(o)]


def outputs(op) -> list[ir.Value]:
    o = op_of(op)
    return list(o.operands)[num_inputs(o):]


def body(op) -> ir.Block:
    return op_of(op).regions[0].blocks[0]


def body_ops(op) -> list[ir.Operation]:
    """The body's ops without the terminator."""
    return [o.operation for o in body(op).operations][:-1]


def yield_op(op) -> ir.Operation:
    return [o.operation for o in body(op).operations][-1]


def loop_sizes(op) -> list[int]:
    """Static loop bounds of a generic, from the shapes its maps index (pure-dim results)."""
    o = op_of(op)
    maps = indexing_maps(o)
    n = maps[0].n_dims if maps else 0
    sizes: list[int | None] = [None] * n
    for v, m in zip(o.operands, maps):
        if not isinstance(v.type, ir.RankedTensorType):
            continue
        shape = ir.RankedTensorType(v.type).shape
        for j, e in enumerate(m.results):
            if isinstance(e, ir.AffineDimExpr) and (sizes[e.position] is None or _neg(sizes[e.position])):
                sizes[e.position] = shape[j] if shape[j] >= 0 else _symbolic_dim(v, j)
    if any(s is None or _neg(s) for s in sizes):
        from uniorch.errors import DataDependentSize

        raise DataDependentSize(f"{o.name}: its loop bounds depend on tensor values (a data-dependent size, as "
                                "bincount's or nonzero's), which no kernel here can bound")
    return [s if not isinstance(s, int) else int(s) for s in sizes]


def _neg(s) -> bool:
    return isinstance(s, int) and s < 0


def _symbolic_dim(v, j: int):
    """A `?` dim as its expression over the size symbols (uniorch/ir/dims.py), else -1."""
    from uniorch.ir import dims

    try:
        return dims.shape(v)[j]
    except dims.UnknownSize:
        return -1


def block_arg_used(op, i: int) -> bool:
    return len(list(body(op).arguments[i].uses)) > 0


def _defined_in_body(v: ir.Value, op) -> bool:
    owner = v.owner
    blk = body(op)
    if isinstance(owner, ir.Block):
        return owner == blk
    p = owner
    while p is not None:
        if p == op_of(op):
            return True
        p = p.parent
    return False


def captured_values(op) -> list[ir.Value]:
    """Values defined outside `op` and used inside its region (e.g. the table of a gather)."""
    o = op_of(op)
    out: list[ir.Value] = []

    def visit(inner):
        inner = inner.operation
        if inner == o:
            return ir.WalkResult.ADVANCE
        for v in inner.operands:
            if not _defined_in_body(v, o) and v not in out:
                out.append(v)
        return ir.WalkResult.ADVANCE

    o.walk(visit)
    return out


# -- classification ---------------------------------------------------------------------------------
def is_pointwise(op) -> bool:
    return is_generic(op) and all(t == "parallel" for t in iterator_types(op))


def is_reduction(op) -> bool:
    return is_generic(op) and any(t == "reduction" for t in iterator_types(op))


def is_data_movement(op) -> bool:
    """A transpose / broadcast / copy: all-parallel, one tensor input, body yields it unchanged."""
    if not is_pointwise(op):
        return False
    ins, outs = inputs(op), outputs(op)
    if len(ins) != 1 or len(outs) != 1 or not isinstance(ins[0].type, ir.RankedTensorType):
        return False
    if body_ops(op):
        return False
    y = yield_op(op)
    return len(y.operands) == 1 and y.operands[0] == body(op).arguments[0]


def is_permutation_movement(op) -> bool:
    """Data movement whose input map is a permutation of the loops (a transpose, no broadcast)."""
    if not is_data_movement(op):
        return False
    m_in, m_out = indexing_maps(op)
    sizes = loop_sizes(op)
    dims_in = [e.position for e in m_in.results if isinstance(e, ir.AffineDimExpr)]
    nonunit = [d for d in range(len(sizes)) if sizes[d] != 1]
    ok_in = all(isinstance(e, ir.AffineDimExpr) or (isinstance(e, ir.AffineConstantExpr) and e.value == 0)
                for e in m_in.results)
    return ok_in and sorted(d for d in dims_in if sizes[d] != 1) == nonunit and len(set(dims_in)) == len(dims_in)


def is_fill(op) -> bool:
    """All-parallel and reads no tensor: a constant fill or an iota (linalg.index)."""
    if not is_pointwise(op):
        return False
    if any(isinstance(v.type, ir.ShapedType) for v in inputs(op)):
        return False
    return all(o.name != "tensor.extract" for o in body_ops(op))


def is_cast_only(op, cast: str) -> bool:
    """A pointwise generic that only applies `cast` (e.g. "arith.extf") to its one input."""
    if not is_pointwise(op) or len(inputs(op)) != 1 or len(op_of(op).results) != 1:
        return False
    ops = body_ops(op)
    return (len(ops) == 1 and ops[0].name == cast and ops[0].operands[0] == body(op).arguments[0]
            and yield_op(op).operands[0] == ops[0].results[0])


def is_cheap(op) -> bool:
    """Cheap enough to recompute in every kernel that consumes it (instead of a separate kernel)."""
    if not is_pointwise(op):
        return False
    ops = body_ops(op)
    if len(ops) > CHEAP_BODY_OPS:
        return False
    for o in ops:
        if o.name in _CHEAP_MATH:
            continue
        if any(o.name.startswith(p) for p in _EXPENSIVE):
            return False
        if o.regions and len(o.regions) > 0:
            return False
    return True


def is_assert_only(op) -> bool:
    """A generic with no results whose body only checks (`cf.assert`): a runtime shape check."""
    o = op_of(op)
    if not is_generic(o) or len(o.results) != 0:
        return False
    return all(x.name.startswith(("arith.", "math.", "cf.assert", "linalg.index")) for x in body_ops(o))


# -- contractions -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ContractionDims:
    """Loop dims of a contraction by role (generic's loop positions)."""

    batch: tuple[int, ...]
    m: tuple[int, ...]
    n: tuple[int, ...]
    k: tuple[int, ...]
    a: int  # which input is A (its dims are batch+m+k)
    b: int  # which input is B (batch+k+n)


def _strip_extf(v: ir.Value, blk: ir.Block, used: list | None = None) -> ir.Value | None:
    """The block argument `v` reads: `v` itself, the operand of an `arith.extf` of one, or either
    of those scaled by a constant (`mulf`/`divf`: SDPA multiplies q and k by sqrt(scale) each).
    Body ops passed through go to `used`."""
    if isinstance(v.owner, ir.Block):
        return v
    o = op_of(v.owner)
    if o.name == "arith.extf" and isinstance(o.operands[0].owner, ir.Block):
        if used is not None:
            used.append(o)
        return o.operands[0]
    if o.name == "arith.extf" and str(o.operands[0].type) in ("f16", "bf16"):
        # a 16-bit factor scaled by a constant and rounded to its type, then widened (bf16
        # `(q * 0.125) @ kᵀ` with the scaling fused into the matmul; an inexact scale is applied in
        # fp32 and rounded, capture/opmath.py): the tile is scaled and rounded as eager's tensor was
        inner = o.operands[0]
        p = None if isinstance(inner.owner, ir.Block) else op_of(inner.owner)
        rounded = p is not None and p.name == "arith.truncf"
        if rounded:
            inner = p.operands[0]
            p = None if isinstance(inner.owner, ir.Block) else op_of(inner.owner)
        if p is not None and p.name in ("arith.mulf", "arith.divf"):
            got = _strip_extf(inner, blk, used)
            if got is not None and used is not None:
                used.append(o)
                if rounded:
                    used.append(op_of(o.operands[0].owner))
            return got
    if o.name in ("arith.mulf", "arith.divf"):
        a, c = o.operands
        if o.name == "arith.mulf" and not _constant_in_body(c, blk):
            a, c = c, a
        if _constant_in_body(c, blk):
            inner = _strip_extf(a, blk, used)
            if inner is not None and used is not None:
                used.append(o)
                _constant_in_body(c, blk, used)
            return inner
    return None


def _constant_in_body(v: ir.Value, blk: ir.Block, used: list | None = None) -> bool:
    """Whether `v` depends on no block argument (constants and casts of them)."""
    if isinstance(v.owner, ir.Block):
        return False
    o = op_of(v.owner)
    if o.name == "arith.constant":
        return True
    if o.name not in ("arith.truncf", "arith.extf") or not _constant_in_body(o.operands[0], blk, used):
        return False
    if used is not None:
        used.append(o)
    return True


def contraction_dims(op) -> ContractionDims | None:
    """Dims by role if `op` is a (batch-)matmul-like generic, else None.

    Requires: two inputs and one output; body `out + a*b` (operands of add and mul in either order,
    `a`/`b` optionally through `arith.extf`); float element types; every map a projected permutation
    (pure dims only); reduction loops appear in both inputs and not in the output; parallel loops
    appear in the output; every loop dim is batch (A, B, C), m (A, C), n (B, C) or k (A, B).
    """
    o = op_of(op)
    if not is_generic(o) or num_inputs(o) != 2 or len(outputs(o)) != 1 or len(o.results) != 1:
        return None
    its = iterator_types(o)
    if "reduction" not in its:
        return None
    maps = indexing_maps(o)
    dims = []
    for m in maps:
        if m.n_symbols or not all(isinstance(e, ir.AffineDimExpr) for e in m.results):
            return None
        ds = [e.position for e in m.results]
        if len(set(ds)) != len(ds):
            return None
        dims.append(set(ds))
    blk = body(o)
    ops = body_ops(o)
    y = yield_op(o)
    if len(y.operands) != 1 or len(ops) < 2 or len(ops) > 9:
        return None
    add = y.operands[0].owner
    if isinstance(add, ir.Block) or op_of(add).name != "arith.addf":
        return None
    a0, a1 = add.operands
    out_arg = blk.arguments[2]
    if a0 == out_arg:
        prod = a1
    elif a1 == out_arg:
        prod = a0
    else:
        return None
    mul = prod.owner
    if isinstance(mul, ir.Block) or op_of(mul).name != "arith.mulf":
        return None
    used: list = []
    x, w = (_strip_extf(v, blk, used) for v in mul.operands)
    if x is None or w is None or {x, w} != {blk.arguments[0], blk.arguments[1]} or x == w:
        return None
    allowed = [op_of(add), op_of(mul)] + [op_of(u) for u in used]
    if any(not any(b == a for a in allowed) for b in ops):
        return None
    if not all(isinstance(ir.RankedTensorType(v.type).element_type, (ir.F32Type, ir.F16Type, ir.BF16Type, ir.F64Type))
               for v in list(o.operands)):
        return None
    da, db, dc = dims
    batch, m_, n_, k_ = [], [], [], []
    for d, it in enumerate(its):
        ina, inb, inc = d in da, d in db, d in dc
        if it == "reduction":
            if not (ina and inb and not inc):
                return None
            k_.append(d)
        else:
            if not inc:
                return None
            if ina and inb:
                batch.append(d)
            elif ina:
                m_.append(d)
            elif inb:
                n_.append(d)
            else:
                return None  # broadcast into the output only: not a contraction
    if not m_ and not n_:
        # a (batched) dot product: no tile of tl.dot to fill; the reduction template sums it
        return None
    return ContractionDims(tuple(batch), tuple(m_), tuple(n_), tuple(k_), 0, 1)


def is_contraction(op) -> bool:
    """A (batch-)matmul `linalg.generic`, possibly with permuted operands (see `contraction_dims`)."""
    try:
        return contraction_dims(op) is not None
    except (ValueError, KeyError):
        return False


def is_identity_map(m: ir.AffineMap) -> bool:
    """Every loop dim in order, nothing else (no context needed, unlike comparing with
    `AffineMap.get_identity`)."""
    return [e.position if isinstance(e, ir.AffineDimExpr) else None for e in m.results] == list(range(m.n_dims))


def map_dims(m: ir.AffineMap) -> set[int]:
    """Loop dims an indexing map reads (inside sums and products too)."""
    return set().union(*[expr_dims(r) for r in m.results])


def expr_dims(e) -> set[int]:
    """Loop dims one affine expression of a map reads."""
    e = e.maybe_downcast() if hasattr(e, "maybe_downcast") else e
    if isinstance(e, ir.AffineDimExpr):
        return {e.position}
    if isinstance(e, ir.AffineBinaryExpr):
        return expr_dims(e.lhs) | expr_dims(e.rhs)
    return set()


def is_convolution(op) -> bool:
    """A convolution generic (`out + x[.., oh * stride + kh * dilation, ..] * w[..]`: some input
    index is a sum of loop dims) that the tiled contraction template takes as an implicit GEMM
    (codegen/contraction_plan.py `supports`): M, N = output channels and batch x output pixels,
    K = input channels x kernel window; groups and depthwise channels are its batch dims."""
    o = op_of(op)
    if not is_reduction(o) or is_contraction(o):
        return False
    try:
        maps = indexing_maps(o)
    except (ValueError, KeyError):
        return False
    if not any(isinstance(e, ir.AffineBinaryExpr) for m in maps for e in m.results):
        return False
    from .contraction_plan import supports  # late: contraction_plan imports this module's siblings

    return supports(o)


# -- reductions -------------------------------------------------------------------------------------
def _depends_on(v: ir.Value, args: list[ir.Value], blk: ir.Block) -> bool:
    stack, seen = [v], []
    while stack:
        x = stack.pop()
        if any(x == s for s in seen):
            continue
        seen.append(x)
        if any(x == a for a in args):
            return True
        owner = x.owner
        if isinstance(owner, ir.Block):
            continue
        stack.extend(owner.operands)
    return False


def reduction_combiners(op) -> list[tuple[str, ir.Value]] | None:
    """Per output, `(combiner op name, combined value)` if the body is `out_k = comb(out_k, f(ins))`.

    `f` must not read any output argument and each output argument is used exactly once, by its
    combiner; then the result is comb(init, reduce_comb(f)) and the reduction can be tree-shaped.
    None if any output does not have this form (the caller then evaluates the body serially).
    """
    o = op_of(op)
    blk = body(o)
    n_in = num_inputs(o)
    out_args = list(blk.arguments)[n_in:]
    y = yield_op(o)
    result = []
    for k, v in enumerate(y.operands):
        comb = v.owner
        if isinstance(comb, ir.Block) or op_of(comb).name not in COMBINERS:
            return None
        a, b = comb.operands
        if a == out_args[k]:
            other = b
        elif b == out_args[k]:
            other = a
        else:
            return None
        if len(list(out_args[k].uses)) != 1:
            return None
        if _depends_on(other, out_args, blk):
            return None
        result.append((op_of(comb).name, other))
    return result


@dataclass(frozen=True)
class PoolWindow:
    """A pooling reduction `out[.., p, ..] = comb(out, x[.., p * stride + r, ..])` over one tensor
    `x` (its input 0): per dim of x, `(pool loop dim, stride, window loop dim or None, window size)`."""

    dims: tuple
    combiner: str

    @property
    def windows(self) -> int:
        n = 1
        for _, _, r, k in self.dims:
            n *= k if r is not None else 1
        return n


_POOL_COMBINERS = ("arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf", "arith.addf")


def pooling_window(op) -> PoolWindow | None:
    """The window of a pooling generic whose windows do not overlap (each pooled position reads its
    own `window <= stride` elements per dim, so a producer computed per window element is computed
    once), or None. Other inputs may only give the window's shape (unused in the body)."""
    o = op_of(op)
    if not is_reduction(o) or len(o.results) != 1:
        return None
    combs = reduction_combiners(o)
    blk = body(o)
    if not combs or combs[0][0] not in _POOL_COMBINERS or combs[0][1] != blk.arguments[0]:
        return None
    if any(block_arg_used(o, i) for i in range(1, num_inputs(o))) or len(body_ops(o)) != 1:
        return None
    try:
        maps, sizes = indexing_maps(o), loop_sizes(o)
    except (ValueError, KeyError):
        return None
    iters = iterator_types(o)
    out_map = maps[num_inputs(o)]
    out_dims = [e.position for e in out_map.results if isinstance(e, ir.AffineDimExpr)]
    if len(out_dims) != len(out_map.results) or sorted(out_dims) != [d for d, t in enumerate(iters) if t == "parallel"]:
        return None
    from .contraction_ir import Lin, _lin  # late: contraction_ir imports this module
    from .source import CodegenError

    env = [Lin.dim(d) for d in range(len(iters))]
    dims, used = [], set()
    for e in maps[0].results:
        try:
            lin = _lin(e, env, o)
        except CodegenError:
            return None
        if lin.const:
            return None
        par = [(d, c) for d, c in lin.terms if iters[d] == "parallel"]
        red = [(d, c) for d, c in lin.terms if iters[d] == "reduction"]
        if len(par) != 1 or len(red) > 1 or par[0][0] in used:
            return None
        p, s = par[0]
        if red:
            r, c = red[0]
            if c != 1 or r in used or sizes[r] > s:  # overlapping windows: elements read twice
                return None
            used.add(r)
            dims.append((p, s, r, sizes[r]))
        else:
            if s != 1:
                return None
            dims.append((p, 1, None, 1))
        used.add(p)
    if any(t == "reduction" and d not in used for d, t in enumerate(iters)):
        return None
    return PoolWindow(tuple(dims), combs[0][0])
