"""Contraction kernels, analysis: which generic is the contraction, how its loop dimensions
classify (batch / M / N / K), and what feeds and follows it (`_Plan`); `supports` for fusion."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from torch_mlir import ir

from uniorch.ir import dims

from . import body as _body
from . import patterns as _pat
from .contraction_ir import (
    Lin, _as_op, _const_of, _dim_pos, _dims_of, _elem, _is_float, _is_shaped, _iterators, _lin,
    _maps, _producer, _shape, kernel_parts,
)
from .operand_sums import OPERAND_SUM, cast_tail, sum_mapping
from .source import CodegenError


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
    dot_scaled: tuple = (None, None)   # per side: (factor, constant, "arith.mulf"/"divf", its 16-bit type) or None
    f32_scaled: tuple = (None, None)   # the same for float32 factors (attention moves it onto the scores)
    window: "_Window | None" = None  # a pooling of the epilogue computed per window element
    row_stats: bool = False        # per-row sums reduced from the A tile (passes/fuse_row_stats.py)
    row_n: bool = False            # per-row sums of the epilogue, over the output tile's N axis
    siblings: list = field(default_factory=list)  # products sharing a factor tile (passes/fuse_siblings.py): their _classify
    shared: str = "a"              # the tile side ("a" or "b") that the siblings' shared first factor is on
    channels_last: int | None = None  # a convolution's channel dim, enumerated innermost in K (conv_layout.py)
    tile_stats: list = field(default_factory=list)  # per-chunk partial sums of the epilogue (contraction_stats.py)
    apart: list = field(default_factory=list)  # results the kernel stores by its own code (attention's log-sum-exp)
    tile_rows: tuple | None = None  # ("m" | "n", L): the tile axis they chunk, and the chunk length
    tile_stat_layouts: list = field(default_factory=list)  # per tile statistic: contraction_stats._stat_layout
    windowed: bool = False         # a factor tile computed tap by tap (contraction_window.py)
    # (generic, tile side, {its dim: loop dim}, its cast_tail): operand_sums.py
    operand_sums: list = field(default_factory=list)

    @property
    def windows(self) -> int:
        return self.window.count if self.window is not None else 1

    def extent(self, c: str) -> int:
        return dims.prod([self.sizes[d] for d in self.order[c]]) if self.order[c] else 1

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


@dataclass
class _Window:
    """A pooling over the epilogue (fusion's try_join_window): output dim `d` of the contraction
    holds pooled positions; window element `(o_d, ...)` is the product at `d * stride + o_d`."""
    op: object                     # the pooling generic
    strides: dict                  # contraction dim -> stride
    extents: dict                  # contraction dim -> window size
    full: set                      # values over the full-size output (before the pooling)
    side: str = ""                 # "m" or "n": the tile axis the windowed dims are on

    @property
    def count(self) -> int:
        return dims.prod(list(self.extents.values()))

    def offsets(self) -> list[dict]:
        """Every window element, as {dim: offset}."""
        out = [{}]
        for d, k in self.extents.items():
            out = [{**o, d: i} for o in out for i in range(k)]
        return out


# tensor.pad (a convolution's zero padding), tensor.concat and tensor.insert_slice (a transposed
# convolution's zero-stuffed input): read through masked loads
# (contraction_emit.py)
_ALLOWED_OUTSIDE = ("arith.constant", "tensor.empty", "linalg.generic", "tensor.pad", "tensor.concat", "tensor.insert_slice",
                    "func.return")
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
    batch = dims.prod([sizes[d] for d in order["b"]])
    if isinstance(batch, int) and batch > 65535:  # symbolic: checked per launch (KernelSource.launch_grid)
        raise CodegenError(gen, f"batch extent {batch} exceeds the grid's second axis")

    # dot operand types (16-bit operands widened by arith.extf go to tl.dot as they are)
    def dot_type(v):
        p = _producer(v)
        if p is not None and p.name == "arith.extf" and str(p.operands[0].type) in ("f16", "bf16"):
            return str(p.operands[0].type)
        if isinstance(v.owner, ir.Block) and v.owner == body:
            # a factor that a fused producer widened from 16 bits (a 16-bit LayerNorm's output,
            # rounded then widened): its float32 values are exact in 16 bits, so the tile goes
            # to tl.dot narrowed back, without loss
            narrow = widened_from(gen.operands[ir.BlockArgument(v).arg_number])
            if narrow is not None:
                return narrow
        return str(v.type)

    def scaled(v, types=("f16", "bf16")):
        # (narrow factor, scale, "mulf" | "divf"): a 16-bit factor times a constant (SDPA scales
        # q and k by sqrt(scale) each); attention moves the constant onto its scores
        p = _producer(v)
        if p is None or p.name not in ("arith.mulf", "arith.divf"):
            return None
        a, c = p.operands
        if p.name == "arith.mulf" and not _pat._constant_in_body(c, body):
            a, c = c, a
        scale = _const_float(c)
        narrow = dot_type(a)
        if scale is None or narrow not in types:
            return None
        return (a, scale, p.name, narrow)

    dot_types = (dot_type(x), dot_type(y))
    dot_scaled = (scaled(x), scaled(y))
    f32_scaled = (scaled(x, ("f32",)), scaled(y, ("f32",)))
    for t in dot_types + (str(x.type), str(y.type)):
        if not _is_float(t):
            raise CodegenError(gen, f"contraction factor of type {t} (only floating point is supported)")
    for o in body_ops[:-1]:
        if o.name not in _KNOWN_BODY_OPS:
            raise CodegenError(o, "op not supported in a contraction body")
    return dict(gen=gen, maps=maps, n_in=n_in, sizes=sizes, cls=cls, order=order, x=x, y=y,
                acc_layout=acc_layout, dot_types=dot_types, dot_scaled=dot_scaled, f32_scaled=f32_scaled)



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


ROW_STAT = "uniorch.row_stat"  # passes/fuse_row_stats.py
SIBLING = "uniorch.sibling"  # passes/fuse_siblings.py
TILE_STAT = "uniorch.tile_stat"  # passes/tile_stats.py
WINDOW_PRODUCER = "uniorch.window_producer"  # passes/fuse_depthwise.py, codegen/contraction_window.py


def _analyze(kernel) -> _Plan:
    func, name, args, ops = kernel_parts(kernel)
    ret = ops[-1]
    if ret.name != "func.return":
        raise CodegenError(ret, "kernel body does not end in func.return")
    for a in args:
        if not _is_shaped(a):
            raise CodegenError(func, "kernel arguments must be tensors")
        _shape(a)
    for op in ops:
        if op.name in ("tensor.expand_shape", "tensor.collapse_shape") and (
                _is_empty(op.operands[0])  # a reshaped tensor.empty: still only a shape (the outs of a fill)
                or [n for n in _shape(op.results[0]) if n != 1] == [n for n in _shape(op.operands[0]) if n != 1]):
            continue  # or size-1 dims added or dropped (an iota's): read through by the emitter
        if op.name not in _ALLOWED_OUTSIDE:
            raise CodegenError(op, "op not supported inside a contraction kernel")
        if op.name == "arith.constant" and _is_shaped(op.results[0]):
            raise CodegenError(op, "tensor constants inside a contraction kernel are not supported")
    gens = [op for op in ops if op.name == "linalg.generic"]
    contr = [op for op in gens if "reduction" in _iterators(op) and _pat.pooling_window(op) is None
             and ROW_STAT not in op.attributes and SIBLING not in op.attributes and TILE_STAT not in op.attributes
             and WINDOW_PRODUCER not in op.attributes and OPERAND_SUM not in op.attributes]
    if len(contr) != 1:
        raise CodegenError(contr[1] if contr else func,
                           f"a contraction kernel needs exactly one reduction generic, found {len(contr)}")
    gen = contr[0]
    plan = _Plan(func, name, args, list(ret.operands), **_classify(gen))
    plan.windowed = any(WINDOW_PRODUCER in op.attributes for op in gens)
    for sib in (op for op in gens if SIBLING in op.attributes):
        c = _classify(sib)
        # the shared first factor may be on either tile side (a convolution's input is the B side)
        plan.shared = "a" if _origin(gen, plan.x) == 0 else "b"
        side = "a" if _origin(sib, c["x"]) == 0 else "b"
        if (c["sizes"] != plan.sizes or c["cls"] != plan.cls or c["acc_layout"] != plan.acc_layout
                or c["dot_types"] != plan.dot_types or side != plan.shared
                or _origin(gen, plan.x if side == "a" else plan.y) != 0
                or str(c["maps"][0]) != str(plan.maps[0]) or not same_factor(sib.operands[0], gen.operands[0])):
            raise CodegenError(sib, "a sibling product that does not share the first one's factor tile")
        plan.siblings.append(c)
    plan.row_stats = any(ROW_STAT in op.attributes and not _after(op, gen, ops) for op in gens)
    for op in (op for op in gens if OPERAND_SUM in op.attributes):
        got = sum_mapping(gen, op)
        if got is None or plan.siblings or plan.windowed:
            raise CodegenError(op, "a sum of a factor that the contraction's K loop does not read as it is")
        side = "a" if _origin(gen, plan.x) == (0 if got[0] == "a" else 1) else "b"
        plan.operand_sums.append((op, side, got[1], cast_tail(op)))
    if plan.siblings and plan.window is not None:
        raise CodegenError(gen, "sibling products with a pooling")
    plan.layouts = epilogue_layouts(plan, ops)
    layouts = plan.layouts
    if plan.operand_sums and (plan.window is not None or plan.tile_stats):
        raise CodegenError(plan.operand_sums[0][0], "a sum of a factor beside a pooling or tile statistics")
    pools = [op for op in gens if "reduction" in _iterators(op) and _pat.pooling_window(op) is not None]
    if pools and (plan.window is None or len(pools) > 1):
        raise CodegenError(pools[-1], "a pooling inside a contraction kernel that is not over its output")
    if plan.window is not None:
        w = plan.window
        sides = {plan.cls[d] for d in w.strides}
        if len(sides) != 1 or not sides <= {"m", "n"}:
            raise CodegenError(w.op, "pooling window along dims of both factors or of the batch")
        w.side = sides.pop()
        pooled = _shape(w.op.results[0])
        out_lay = _get(layouts, w.op.results[0])
        for j, lin in enumerate(out_lay):
            d = lin.terms[0][0] if not lin.is_const() else None
            if d in w.strides:
                plan.sizes[d] = pooled[j]  # the kernel's output domain is the pooled one

    want = sorted(d for d, c in plan.cls.items() if c in "bmn")
    acc_shape = _shape(gen.results[0])
    if plan.tile_stats:
        from .contraction_stats import check_tile_stats
        check_tile_stats(plan)
    stat_results = [r for op in plan.tile_stats for r in op.results] \
        + [v for _, _, _, tail in plan.operand_sums for v, _ in tail]
    for r in plan.results:
        if any(r == s for s in stat_results):
            continue
        if not _known(layouts, r) and _shape(r) == acc_shape:
            # a kernel value not derived from the product (e.g. a fill also used outside) with the
            # output's shape: computed and stored elementwise over the same tiles
            layouts[r] = plan.acc_layout
        if not _known(layouts, r):
            raise CodegenError(_producer(r) or func, "kernel result is not computed over the contraction's output")
        if plan.window is not None and any(r == v for v in plan.window.full):
            raise CodegenError(_producer(r) or func, "kernel result of full size beside a pooling of it")
        lay = _get(layouts, r)
        got = sorted(d for lin in lay for d in lin.dims())
        if got != want or any(not (lin.is_const() or (len(lin.terms) == 1 and lin.terms[0][1] == 1)) for lin in lay):
            raise CodegenError(_producer(r) or func, "kernel result does not cover the contraction's output exactly once")
    return plan


def _origin(gen, v):
    """The operand number of `gen` that body value `v` is (through casts in the body), or None."""
    while not isinstance(v.owner, ir.Block):
        op = _as_op(v.owner)
        if op.name not in ("arith.extf", "arith.truncf", "arith.sitofp", "arith.uitofp") or len(op.operands) != 1:
            return None
        v = op.operands[0]
    return ir.BlockArgument(v).arg_number if v.owner == gen.regions[0].blocks[0] else None


def same_factor(a, b) -> bool:
    """The same tensor, or the same tensor widened by one-op generics through the same map: the
    A tile of one product is the other's."""
    if a == b:
        return True
    pa, pb = _producer(a), _producer(b)
    return (pa is not None and pb is not None and _pat.is_cast_only(pa, "arith.extf")
            and _pat.is_cast_only(pb, "arith.extf") and pa.operands[0] == pb.operands[0]
            and str(a.type) == str(b.type) and [str(m) for m in _maps(pa)] == [str(m) for m in _maps(pb)])


def _after(op, gen, ops) -> bool:
    """Whether `op` comes after the contraction `gen` in the kernel (an epilogue op)."""
    i = next(i for i, o in enumerate(ops) if o == gen)
    return any(o == op for o in ops[i + 1:])


def epilogue_layouts(plan: _Plan, ops: list) -> dict:
    """Where each value computed over the contraction's output sits: the contraction result and
    every pointwise generic of `ops` after it that reads such a value (a Lin per tensor dim)."""
    gen = plan.gen
    products = [gen] + [c["gen"] for c in plan.siblings]
    layouts = {c.results[0]: plan.acc_layout for c in products}
    after = False
    for op in ops:
        if any(op == c for c in products):
            after = True
            continue
        if after and op.name in ("tensor.expand_shape", "tensor.collapse_shape") and _known(layouts, op.operands[0]):
            lay = view_index(_get(layouts, op.operands[0]), op)
            if lay is not None:
                layouts[op.results[0]] = lay
            continue
        if not after or op.name != "linalg.generic":
            continue
        gview = op.opview
        g_ops = list(gview.inputs) + list(gview.outputs)
        g_maps = _maps(op)
        chain = [(v, mp) for v, mp in zip(g_ops, g_maps) if _is_shaped(v) and _known(layouts, v)]
        if not chain:
            continue
        if TILE_STAT in op.attributes:
            plan.tile_stats.append(op)  # its own store (contraction_stats.py): no layout on the tile
            continue
        if "reduction" in _iterators(op) and ROW_STAT in op.attributes:
            plan.row_n = True  # a norm's statistics over the output's rows: laid out like a broadcast
        elif "reduction" in _iterators(op):
            win = _pat.pooling_window(op)
            if win is None or plan.window is not None or not any(v == op.operands[0] for v, _ in chain):
                raise CodegenError(op, "a reduction over the contraction's result cannot be fused as an epilogue")
            plan.window = _pool_layout(plan, op, win, layouts)
            continue
        if plan.window is not None and any(any(v == f for f in plan.window.full) for v, _ in chain):
            raise CodegenError(op, "epilogue after a pooling reads the full-size values before it")
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
    return layouts


def _pool_layout(plan: _Plan, op, win, layouts: dict) -> _Window:
    """The pooling `op`'s result placed on the contraction's output dims (a pooled position per
    dim); the pooled tensor must sit on pure output dims."""
    src_lay = _get(layouts, op.operands[0])
    strides, extents, by_pool_dim = {}, {}, {}
    for (p, s, r, k), lin in zip(win.dims, src_lay):
        if lin.is_const():
            if r is not None and k > 1:
                raise CodegenError(op, "pooling window along a size-1 dim of the output")
            continue
        if len(lin.terms) != 1 or lin.terms[0][1] != 1 or lin.const:
            raise CodegenError(op, "pooling of a value that is not on the output's dims")
        d = lin.terms[0][0]
        by_pool_dim[p] = Lin.dim(d)
        if r is not None:
            strides[d], extents[d] = s, k
    out_map = _maps(op)[len(op.opview.inputs)]
    sizes = _loop_sizes(op)
    out_lay = []
    for e in out_map.results:
        p = _dim_pos(e)
        if p in by_pool_dim:
            out_lay.append(by_pool_dim[p])
        elif sizes[p] == 1:
            out_lay.append(Lin.cst(0))
        else:
            raise CodegenError(op, "pooled dim not tied to the contraction's output")
    layouts[op.results[0]] = tuple(out_lay)
    full = {v for v in layouts if not any(v == r for r in op.results)}
    return _Window(op, strides, extents, full)


def unit_view_index(idx: tuple, src_shape, dst_shape):
    """The index into `dst_shape` of element `idx` of `src_shape`, for a reshape that only adds or
    drops size-1 dims (None for any other reshape)."""
    if [n for n in src_shape if n != 1] != [n for n in dst_shape if n != 1]:
        return None
    inner = iter([lin for lin, n in zip(idx, src_shape) if n != 1])
    return tuple(Lin.cst(0) if n == 1 else next(inner) for n in dst_shape)


def reassociation(op) -> list[list[int]]:
    """An expand_shape's or collapse_shape's groups: dims of the larger-rank side, per dim of the other."""
    return [[int(ir.IntegerAttr(d).value) for d in ir.ArrayAttr(g)]
            for g in ir.ArrayAttr(op.attributes["reassociation"])]


def view_index(idx: tuple, op):
    """The index into a view's result of element `idx` of its operand: a unit view, or a collapse
    whose merged dims have static sizes (dim i of a group of sizes n_i is sum idx_i * prod n_(i+1..));
    None for any other view (a split needs division)."""
    src, dst = _shape(op.operands[0]), _shape(op.results[0])
    lay = unit_view_index(idx, src, dst)
    if lay is not None or op.name != "tensor.collapse_shape":
        return lay
    if any(len(g) > 1 and not all(isinstance(idx[d], Lin) for d in g) for g in reassociation(op)):
        return None
    return _merged(idx, src, op)


def expand_source_index(idx: tuple, op) -> tuple:
    """The operand element an expand_shape's result element `idx` is (the inverse of a split is
    linear): per operand dim, sum idx_i * prod of the later sizes in its group (static)."""
    out = _merged(idx, _shape(op.results[0]), op)
    if out is None:
        raise CodegenError(op, "a split of a symbolic dim")
    return out


def _merged(idx: tuple, sizes: list, op):
    """Per group of the view's reassociation, the row-major index of the group's dims (`idx`, over
    the larger-rank side of sizes `sizes`); None where a merged dim is symbolic."""
    out = []
    for group in reassociation(op):
        lin, stride = Lin.cst(0), 1
        for d in reversed(group):
            if len(group) > 1 and not isinstance(sizes[d], int):
                return None
            lin = lin + idx[d].scale(stride)
            stride *= sizes[d] if len(group) > 1 else 1
        out.append(lin)
    return tuple(out)


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


def widened_from(t) -> str | None:
    """"bf16"/"f16" when every element of the float32 tensor `t` is the widening of a 16-bit float:
    its generic yields `arith.extf` of a 16-bit value, or copies (a transpose, a view) such a
    tensor. Else None."""
    p = _producer(t)
    if p is None or not isinstance(t.type, ir.RankedTensorType) or str(t.type.element_type) != "f32":
        return None
    if p.name in ("tensor.expand_shape", "tensor.collapse_shape"):
        return widened_from(p.operands[0])
    if p.name != "linalg.generic":
        return None
    blk = p.regions[0].blocks[0]
    ops = blk.operations
    y = ops[len(ops) - 1].operands[ir.OpResult(t).result_number]
    if isinstance(y.owner, ir.Block) and y.owner == blk:
        n = ir.BlockArgument(y).arg_number
        return widened_from(p.operands[n]) if n < len(p.operands) else None
    ext = _producer(y)
    if ext is None or ext.name != "arith.extf":
        return None
    narrow = str(ext.operands[0].type)
    return narrow if narrow in ("f16", "bf16") else None


def _const_float(v) -> float | None:
    """The value of a body constant (`arith.constant`, through float casts), rounded to v's type."""
    p = _producer(v)
    if p is None:
        return None
    if p.name in ("arith.truncf", "arith.extf"):
        inner = _const_float(p.operands[0])
        if inner is None:
            return None
        return float(np.array(inner, dtype=np.float64).astype({"f32": np.float32, "f64": np.float64}.get(str(v.type), np.float32)))
    if p.name != "arith.constant" or not isinstance(p.attributes["value"], ir.FloatAttr):
        return None
    return float(ir.FloatAttr(p.attributes["value"]).value)

