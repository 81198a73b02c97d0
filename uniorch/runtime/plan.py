"""A launch plan: `@main` after scheduling and memory planning, as steps over torch tensors.

Each op of `@main` becomes one step: a kernel launch (pointers + strides of its operands), a view
(reshape / slice: no copy), or a constant. Buffers follow `uniorch-plan-memory`'s ids and are
allocated per call, so returned tensors never alias each other or a later call's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import re

import numpy as np
import sympy
import torch
from torch_mlir import ir

from uniorch.codegen import CodegenError, KernelSource
from uniorch.errors import UniorchError
from uniorch.ir import dims

from .bound_launch import BoundLaunches, bound_call
from .relayout import relaid

_DTYPES = {
    "f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16,
    "i1": torch.bool, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64,
    "ui8": torch.uint8,
}


class PlanError(UniorchError):
    """`@main` holds an op the runtime cannot execute; the region runs eagerly instead."""

    def __init__(self, op, reason: str):
        self.op_name = op.name
        self.location = str(op.location)
        super().__init__(f"cannot run '{op.name}' in a launch plan: {reason}")


def torch_dtype(t) -> torch.dtype:
    et = str(ir.RankedTensorType(t).element_type)
    if et not in _DTYPES:
        raise KeyError(et)
    return _DTYPES[et]


def shape_of(t) -> list[int]:
    return list(ir.RankedTensorType(t).shape)


@dataclass
class Kernel:
    name: str
    source: KernelSource
    fn: Any
    inplace: dict[int, int]  # result index -> input index written into
    func_op: Any = None  # the kernel's MLIR function, for explain
    launches: int = 0


def inplace_of(kernel_func) -> dict[int, int]:
    """`uniorch.inplace` of a kernel function: result index -> the input it writes into."""
    if "uniorch.inplace" not in kernel_func.attributes:
        return {}
    pairs = [ir.IntegerAttr(a).value for a in ir.ArrayAttr(kernel_func.attributes["uniorch.inplace"])]
    return {k: i for k, i in enumerate(pairs) if i >= 0}


@dataclass
class Step:
    kind: str  # "launch" | "view" | "permute" | "slice" | "concat" | "const" | "alloc"
    run: Callable[[list], None]
    label: str = ""


@dataclass
class LaunchPlan:
    num_inputs: int
    steps: list[Step]
    outputs: list[int]  # value slots returned
    num_slots: int
    kernels: dict[str, Kernel] = field(default_factory=dict)
    buffer_bytes: list[int] = field(default_factory=list)
    launch: Callable = None  # (kernel, inputs, outputs) -> None
    seeds: int = 0  # keys of random ops: a last input, drawn per call (passes/seed_input.py)
    device: Any = None  # where kernels run, when no input says
    symbols: list = field(default_factory=list)  # (input index, dim, symbol): sizes read per call
    # kernel name -> inputs its relayout never copies: their producer writes them in that layout
    laid_out: dict = field(default_factory=dict)
    # per launch step, in order: (kernel, input slots, output slots, {result: input slot written
    # in place}), and the slots views, slices or the return read (runtime/inplace.py)
    launches: list = field(default_factory=list)
    viewed: set = field(default_factory=set)
    pending: list = field(default_factory=list)  # in-place writes taken up after a call succeeds
    bound: Any = None  # BoundLaunches of a static plan (runtime/bound_launch.py)
    built_launch: Any = None  # the launch the plan was built with: bound launches stand in for it only

    def __call__(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        device = device_of(inputs, self.device)
        if self.seeds:  # PyTorch's generator: torch.manual_seed makes a run reproducible
            # drawn on the device itself: a copy from host memory waits for the GPU's stream
            inputs = list(inputs) + [torch.randint(0, 2 ** 62, (self.seeds,), dtype=torch.int64, device=device)]
        ctx = _RunContext(self.buffer_bytes, device, self.launch)
        if self.bound is not None and self.launch is self.built_launch and not self.pending:
            ctx.bound, ctx.stream, ctx.record, code = self.bound.begin(inputs, device)
            if code is not None:  # the call as straight-line code (runtime/plan_code.py)
                return code(inputs, ctx, ctx.stream)
        slots: list[Any] = [None] * self.num_slots
        slots[: self.num_inputs] = inputs
        ctx.sizes = _bind(self.symbols, inputs)
        for step in self.steps:
            step.run(slots, ctx)
        if ctx.record is not None:
            self.bound.finish(ctx.record, len(self.steps), self.outputs)
        if self.pending:  # from the second call on (a first call that fails reruns eagerly: _Region)
            for into, j, a in self.pending:
                into[j] = a
            self.pending = []
            if self.bound is not None:  # the launches' destinations changed: record again
                self.bound.forget()
        return [slots[i] for i in self.outputs]


class _RunContext:
    def __init__(self, buffer_bytes, device, launch):
        self.buffer_bytes = buffer_bytes
        self.device = device
        self.launch = launch
        # bound launches of this call's signature and the stream they take, or the record of this
        # call's launches to bind after it (runtime/bound_launch.py)
        self.bound: Any = None
        self.stream: Any = None
        self.record: Any = None
        self.buffers: dict[int, torch.Tensor] = {}
        self.sizes: dict[str, int] = {}  # size symbols' values in this call (uniorch/ir/dims.py)

    def buffer(self, bid: int, shape, dtype) -> torch.Tensor:
        if self.buffer_bytes[bid] < 0:  # symbolic sizes: this call's size (passes/plan_memory.py)
            return torch.empty(shape, dtype=dtype, device=self.device)
        raw = self.buffers.get(bid)
        if raw is None:
            raw = torch.empty(self.buffer_bytes[bid], dtype=torch.uint8, device=self.device)
            self.buffers[bid] = raw
        n = 1
        for d in shape:
            n *= d
        return raw[: n * dtype.itemsize].view(dtype).view(shape)


def build_plan(module: ir.Module, main, kernels: dict[str, Kernel], launch: Callable) -> LaunchPlan:
    block = main.regions[0].blocks[0]
    slot: dict = {}
    for i, a in enumerate(block.arguments):
        slot[a] = i
    steps: list[Step] = []
    outputs: list[int] = []
    buffer_bytes = [ir.IntegerAttr(a).value for a in ir.ArrayAttr(module.operation.attributes["uniorch.buffer_bytes"])] \
        if "uniorch.buffer_bytes" in module.operation.attributes else []

    blobs = None

    def new_slot(v):
        slot[v] = len(slot)
        return slot[v]

    def src(op, v):
        if v not in slot:
            raise PlanError(op, "uses a value that no step produces")
        return slot[v]

    symbolic = dims.has_symbols(main)
    pieces = _concat_pieces(block)    # a kernel result -> where it lies in a concatenation's buffer
    bid_uses: dict[int, int] = {}    # buffer -> launch outputs it holds (read at a step's first run)
    produced: dict[int, tuple] = {}   # slot -> (its kernel's output orders, output index, kernel)
    reads: dict[int, list] = {}       # slot -> [(kernel, input index)] of the launches reading it
    other: set[int] = set()           # slots read by anything else (views, slices, the return)
    viewed: set[int] = set()          # of those, the slots views and slices read
    launches: list = []
    for op in block.operations:
        op = op.operation
        name = op.name
        if name == "func.return":
            for v in op.operands:  # `torch.empty` returned as is: uninitialized, as eager's
                if v not in slot and not isinstance(v.owner, ir.Block) and v.owner.name == "tensor.empty":
                    steps.append(Step("alloc", _alloc_step(new_slot(v), _shape(v), torch_dtype(v.type))))
                elif symbolic and v not in slot and not isinstance(v.type, ir.ShapedType):
                    steps.append(Step("size", _size_step(op, v, new_slot(v))))  # a size another region reads
            outputs = [src(op, v) for v in op.operands]
            other.update(outputs)
        elif name == "func.call":
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            if callee not in kernels:
                raise PlanError(op, f"kernel @{callee} was not compiled")
            k = kernels[callee]
            # a symbolic kernel's index operands only keep the IR valid (passes/schedule.py)
            ins = [src(op, v) for v in op.operands if not (symbolic and not isinstance(v.type, ir.ShapedType))]
            outs = [new_slot(r) for r in op.results]
            bids = [ir.IntegerAttr(a).value for a in ir.ArrayAttr(op.attributes["uniorch.buffers"])]
            specs = [(_shape(r), torch_dtype(r.type)) for r in op.results]
            orders: dict[int, list] = {}
            for i, s in enumerate(ins):
                reads.setdefault(s, []).append((k, i))
            for j, s in enumerate(outs):
                produced[s] = (orders, j, k)
            for b in bids:
                bid_uses[b] = bid_uses.get(b, 0) + 1
            into: dict[int, int] = {}
            launches.append((k, ins, outs, into))
            placed = {j: pieces[r] for j, r in enumerate(op.results) if r in pieces}
            steps.append(Step("launch", _launch_step(k, ins, outs, bids, specs, orders, bid_uses, buffer_bytes, into,
                                                     len(launches) - 1, placed), callee))
        elif name in ("tensor.expand_shape", "tensor.collapse_shape", "tensor.reshape") and _of_empty(op):
            continue  # a reshaped tensor.empty is a shape; a symbolic kernel's sizes are read off it
        elif name in ("tensor.expand_shape", "tensor.collapse_shape", "tensor.reshape"):
            s, d, shape = src(op, op.operands[0]), new_slot(op.results[0]), _shape(op.results[0])
            other.add(s)
            viewed.add(s)
            steps.append(Step("view", _view_step(s, d, shape)))
        elif symbolic and name == "tensor.cast":
            slot[op.results[0]] = src(op, op.operands[0])  # a type refinement: the same tensor
        elif symbolic and _host_size_op(op):
            continue  # size arithmetic: its values are the size symbols' (uniorch/ir/dims.py)
        elif name == "tensor.concat":  # its pieces' kernels wrote into its buffer (passes/concat_in_place.py)
            srcs = [src(op, v) for v in op.operands]
            other.update(srcs)
            viewed.update(srcs)
            first = _piece_producer(op.operands[0], op)
            bids = ir.ArrayAttr(first.owner.attributes["uniorch.buffers"])
            bid = ir.IntegerAttr(bids[first.result_number]).value
            bid_uses[bid] = bid_uses.get(bid, 0) + 1
            steps.append(Step("concat", _concat_step(new_slot(op.results[0]), bid, _shape(op.results[0]),
                                                     torch_dtype(op.results[0].type))))
        elif name == "linalg.transpose":  # a returned view eager takes too (passes/returned_views.py)
            s = src(op, op.operands[0])
            other.add(s)
            viewed.add(s)
            perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
            steps.append(Step("permute", _permute_step(s, new_slot(op.results[0]), perm)))
        elif name == "tensor.extract_slice":
            other.add(src(op, op.operands[0]))
            viewed.add(src(op, op.operands[0]))
            steps.append(Step("slice", _slice_step(op, src(op, op.operands[0]), new_slot(op.results[0]))))
        elif name == "arith.constant" and isinstance(op.results[0].type, ir.ShapedType):
            if blobs is None:
                blobs = resource_blobs(module)
            steps.append(Step("const", _const_step(op, new_slot(op.results[0]), blobs)))
        elif name in ("tensor.empty", "arith.constant"):
            continue  # shapes and scalars only matter inside kernels
        else:
            raise PlanError(op, "no kernel covers it")
    seeds = ir.IntegerAttr(module.operation.attributes["uniorch.seeds"]).value \
        if "uniorch.seeds" in module.operation.attributes else 0
    symbols = _binders(block) if symbolic else []
    if symbolic:
        _check_bound(main, block, kernels, symbols)
    laid_out = _write_relaid(produced, reads, other)
    return LaunchPlan(len(block.arguments), steps, outputs, len(slot), kernels, buffer_bytes, launch, seeds,
                      symbols=symbols, laid_out=laid_out, launches=launches, viewed=viewed,
                      bound=None if symbolic or not launches else BoundLaunches(len(launches)), built_launch=launch)


_TILED = ("contraction", "attention")


def _kind(k: Kernel) -> str:
    op = k.func_op
    if op is None or "uniorch.kind" not in op.attributes:
        return ""
    return ir.StringAttr(op.attributes["uniorch.kind"]).value


def _write_relaid(produced: dict, reads: dict, other: set) -> dict:
    """Kernel outputs that every reader wants in another layout (KernelSource.relayout: a
    convolution's input channels innermost, an exact fp32 factor N-major) are written in it by
    their producer, which takes any strides, so no reader copies them (H200 run 5: resnet_stack
    bf16 spent 0.20 of its 0.36 ms on the device copying each convolution's input to NHWC). Not
    for what the plan returns or views, nor for outputs written in place. Fills each producing
    step's output orders; returns {kernel name: inputs never copied}, for explain's bytes."""
    total: dict[tuple, int] = {}
    skipped: dict[tuple, int] = {}
    for s, users in reads.items():
        for u, i in users:
            total[(u.name, i)] = total.get((u.name, i), 0) + 1
        if s not in produced or s in other:
            continue
        orders, j, k = produced[s]
        wanted = [dict(u.source.relayout).get(i) for u, i in users]
        want = next((w for w in wanted if w is not None), None)
        # readers that ask for nothing take it as it comes if they load 2-d tiles (a residual in a
        # convolution's epilogue); a pointwise kernel would read it across its own order
        if j in k.inplace or want is None or any(w is not None and w != want for w in wanted) \
                or any(w is None and _kind(u) not in _TILED for (u, _), w in zip(users, wanted)):
            continue
        orders[j] = (list(want), [list(want).index(d) for d in range(len(want))])
        for (u, i), w in zip(users, wanted):
            if w is not None:
                skipped[(u.name, i)] = skipped.get((u.name, i), 0) + 1
    out: dict[str, set] = {}
    for (name, i), n in skipped.items():  # a kernel launched twice: only inputs no call copies
        if n == total[(name, i)]:
            out.setdefault(name, set()).add(i)
    return out


def _check_bound(main, block, kernels: dict, binders: list) -> None:
    """Every size symbol the kernels take is one the inputs give: a region after an op left to
    PyTorch sees only sizes computed from a symbol (a strided convolution's floor((s - 1) / 2) + 1),
    and its launch raised 'Cannot convert symbols to int' at the first call, which failed the whole
    symbolic compile without a reason a user could read. A PlanError instead leaves this region to
    PyTorch, and says why."""
    bound = {b[2] for b in binders}
    used = {sym for k in kernels.values() for sym in getattr(k.source, "symbols", ()) or ()}
    for op in block.operations:  # the buffers the plan allocates, the views it takes
        for r in op.operation.results:
            try:
                if isinstance(r.type, ir.RankedTensorType) and not ir.RankedTensorType(r.type).has_static_shape:
                    sizes = dims.shape(r)
                elif isinstance(r.type, (ir.IndexType, ir.IntegerType)) and op.operation.name != "arith.cmpi":
                    sizes = [dims.index_value(r)]
                else:
                    continue
            except (dims.UnknownSize, ValueError, TypeError):
                continue
            used |= {str(x) for n in sizes if not isinstance(n, int) and hasattr(n, "free_symbols")
                     for x in n.free_symbols}
    needed = sorted(used - bound)
    if needed:
        sizes = []
        for a in block.arguments:
            if isinstance(a.type, ir.RankedTensorType):
                try:
                    sizes.append(str(dims.shape(a)))
                except dims.UnknownSize:
                    continue
        raise PlanError(main, f"size symbol(s) {', '.join(needed)} cannot be read off the region's inputs "
                              f"(their sizes: {'; '.join(sizes)[:200]})")


def _binders(block) -> list:
    """How each size symbol is read from @main's inputs per call: (input, dim or None for a scalar
    input, symbol, solve) where `solve(value)` gives the symbol from that dim's value; a dim that
    is the symbol itself first, then dims (or scalar inputs) linear in one symbol (a cache one longer)."""
    direct, derived = {}, []
    for i, a in enumerate(block.arguments):
        if isinstance(a.type, ir.RankedTensorType):
            entries = [(d, n) for d, n in enumerate(dims.shape(a))]
        else:
            try:
                entries = [(None, dims.index_value(a))]
            except dims.UnknownSize:
                continue
        for d, n in entries:
            if isinstance(n, int):
                continue
            if n.is_Symbol:
                direct.setdefault(str(n), (i, d, str(n), None))
            elif len(n.free_symbols) == 1:
                derived.append((i, d, n))
    out = list(direct.values())
    for i, d, n in derived:
        (sym,) = n.free_symbols
        if str(sym) in direct or any(b[2] == str(sym) for b in out):
            continue
        value = sympy.Symbol("value")
        try:  # a * s + b: floor(s/4) is not invertible (another input must give s), and sympy's
            # solve spent seconds per region finding that out
            poly = sympy.Poly(n, sym)
        except sympy.PolynomialError:
            continue
        if poly.degree() != 1:
            continue
        a, b = poly.all_coeffs()
        out.append((i, d, str(sym), sympy.lambdify(value, (value - b) / a)))
    return out


def _bind(binders: list, inputs: list) -> dict[str, int]:
    sizes = {}
    for i, d, name, solve in binders:
        x = inputs[i]
        value = int(x.shape[d]) if d is not None else int(x)
        sizes[name] = value if solve is None else int(solve(value))
    return sizes


_HOST_SIZE_OPS = ("tensor.dim", "affine.apply", "cf.assert", "tensor.from_elements", "math.ceil", "math.floor",
                  "math.sqrt")


def _size_step(op, v, d):
    try:
        size = dims.index_value(v)
    except dims.UnknownSize as err:
        raise PlanError(op, f"returns a size: {err}") from None
    # a float computed from sizes (1 / n, a batch norm's backward) keeps its fraction
    as_float = str(v.type) in ("f16", "bf16", "f32", "f64")

    def run(slots, ctx):
        slots[d] = dims.evaluate(size, ctx.sizes, as_float)

    return run


def _of_empty(op) -> bool:
    src = op.operands[0].owner
    if isinstance(src, ir.Block):
        return False
    src = src.operation if hasattr(src, "operation") else src
    return src.name == "tensor.empty" or (src.name in ("tensor.expand_shape", "tensor.collapse_shape") and _of_empty(src))


def _host_size_op(op) -> bool:
    """An op of @main computing sizes (or checking them): only shapes depend on it."""
    if op.name in _HOST_SIZE_OPS:
        return True
    return op.name.startswith("arith.") and all(not isinstance(r.type, ir.ShapedType) for r in op.results)


def _shape(v):
    """A value's shape: a list of ints, or (symbolic sizes) a function of the run context."""
    static = shape_of(v.type)
    if all(n >= 0 for n in static):
        return static
    try:
        sizes = dims.shape(v)
    except dims.UnknownSize as err:
        raise PlanError(v.owner if not isinstance(v.owner, ir.Block) else v.owner.owner,
                        f"symbolic sizes: {err}") from None
    return lambda ctx: [dims.evaluate(n, ctx.sizes) for n in sizes]


def _resolve(shape, ctx):
    return shape(ctx) if callable(shape) else shape


def _concat_pieces(block) -> dict:
    """Kernel results that a `tensor.concat` of @main holds: result -> (the concatenation's shape,
    the index of its slice there)."""
    out = {}
    for op in block.operations:
        op = op.operation
        if op.name != "tensor.concat":
            continue
        dim, offset = ir.IntegerAttr(op.attributes["dim"]).value, 0
        shape = shape_of(op.results[0].type)
        for v in op.operands:
            n = shape_of(v.type)[dim]
            out[_piece_producer(v, op)] = (shape, (slice(None),) * dim + (slice(offset, offset + n),))
            offset += n
    return out


def _piece_producer(v, concat):
    """The kernel result a piece of a concatenation is, through reshapes; PlanError where it is
    none (a roll's concatenation of an input's slices: no kernel wrote them into a buffer)."""
    while not isinstance(v.owner, ir.Block) and v.owner.name in ("tensor.expand_shape", "tensor.collapse_shape"):
        v = v.owner.operands[0]
    if isinstance(v.owner, ir.Block) or "uniorch.buffers" not in v.owner.attributes:
        raise PlanError(concat, "a piece of the concatenation is no kernel's result")
    if any(n < 0 for n in shape_of(v.type)):
        raise PlanError(concat, "a piece of the concatenation has symbolic sizes")
    return v


def _concat_step(d, bid, shape, dtype):
    def run(slots, ctx):
        slots[d] = ctx.buffer(bid, shape, dtype)
        if ctx.record is not None:
            ctx.record.trace.append(("concat", d, bid, shape, dtype))

    return run


def _launch_step(k: Kernel, ins, outs, bids, specs, orders: dict, bid_uses: dict, buffer_bytes: list,
                 into: dict, index: int, placed: dict | None = None):
    """`orders`: output index -> (the dim order to write it in, outermost first; its inverse),
    from `_write_relaid`. An output whose buffer holds nothing else in the plan (`bid_uses`) is one
    allocation of its own shape, not views of shared bytes: each view is about a microsecond of
    host time, and a small GPU kernel takes tens. `into`: output index -> the input slot whose
    tensor the kernel writes it into, when that tensor is contiguous (runtime/inplace.py)."""
    allocs: list = []  # made at the first run: `orders` and `bid_uses` are filled once the plan is built
    placed = placed or {}  # output index -> (a concatenation's shape, its slice there): written in place

    def run(slots, ctx):
        source = k.source  # read per call: a refit (runtime/resources.py) replaces it
        if not allocs:
            own = [bid_uses[b] == 1 and buffer_bytes[b] >= 0 for b in bids]
            allocs.extend(_allocator(bid, shape, dtype, orders.get(j), mine) if j not in placed
                          else _piece_allocator(bid, shape, dtype, *placed[j])
                          for j, (bid, (shape, dtype), mine) in enumerate(zip(bids, specs, own)))
        inputs = [slots[i] for i in ins]
        for i, order in source.relayout:  # a factor the kernel reads faster with another dim innermost
            t = inputs[i]
            if t.stride(order[-1]) != 1 and t.numel() > 1:
                # on a GPU a tiled transpose; while the plan only compiles ahead, only its compile
                inputs[i] = relaid(t, order, getattr(ctx.launch, "compiles_only", False))
        if into:
            results = [_into(slots[into[j]], alloc, ctx) if j in into else alloc(ctx) for j, alloc in enumerate(allocs)]
        else:
            results = [alloc(ctx) for alloc in allocs]
        for j, i in k.inplace.items():
            dest, out = inputs[i], results[j]
            if dest.data_ptr() != out.data_ptr():
                out.copy_(dest)  # the destination is still read later: write into a copy
        if source.symbols:  # its size symbols' values in this call (uniorch/ir/dims.py)
            ctx.launch(k, inputs, results, [ctx.sizes[s] for s in source.symbols])
        elif ctx.bound is None or not bound_call(ctx.bound, index, ctx.stream, inputs, results):
            ctx.launch(k, inputs, results)
            if ctx.record is not None:
                ctx.record.launched.append((index, k, inputs, results))
                ctx.record.trace.append(_launch_trace(k, index, ins, outs, into, allocs, slots, inputs, results))
        k.launches += 1
        for j, s in enumerate(outs):
            slots[s] = results[j]

    return run


def _launch_trace(k: Kernel, index: int, ins, outs, into: dict, allocs: list, slots: list, inputs: list,
                  results: list) -> tuple:
    """What this launch did in a recorded call (runtime/plan_code.py): which inputs it relaid,
    and per result the input slot written in place or the allocator."""
    relaid_at = {i: order for i, order in k.source.relayout if inputs[i] is not slots[ins[i]]}
    made = [("into", into[j]) if j in into and r is slots[into[j]] else ("alloc", allocs[j])
            for j, r in enumerate(results)]
    return ("launch", index, k, ins, outs, relaid_at, made, dict(k.inplace))


def _into(t: torch.Tensor, alloc: Callable, ctx) -> torch.Tensor:
    """The input tensor itself where the kernel can write its new value there: contiguous, as
    the kernel writes the result; else a fresh output, copied back after the call as before."""
    return t if t.is_contiguous() else alloc(ctx)


def _allocator(bid: int, shape, dtype, laid, own: bool) -> Callable:
    """ctx -> a launch output: a view of its (shared) buffer, or where the buffer is its own and
    its shape static, one allocation in the layout its readers want."""
    if own and not callable(shape):
        if laid is None:
            return lambda ctx: torch.empty(shape, dtype=dtype, device=ctx.device)
        order, inverse = laid
        stored = [shape[d] for d in order]
        inner = [1] * len(stored)
        for i in range(len(stored) - 2, -1, -1):
            inner[i] = inner[i + 1] * stored[i + 1]
        strides = [inner[inverse[d]] for d in range(len(shape))]
        return lambda ctx: torch.empty_strided(shape, strides, dtype=dtype, device=ctx.device)
    if laid is None:
        return lambda ctx: ctx.buffer(bid, _resolve(shape, ctx), dtype)
    order, inverse = laid

    def relaid(ctx):
        full = _resolve(shape, ctx)
        return ctx.buffer(bid, [full[d] for d in order], dtype).permute(inverse)

    return relaid


def _piece_allocator(bid: int, shape, dtype, whole, index) -> Callable:
    """ctx -> a launch output that is a piece of a concatenation: its slice of the buffer, viewed in
    the shape the kernel writes (uniorch-concat-in-place checked that this is a view)."""
    return lambda ctx: ctx.buffer(bid, whole, dtype)[index].view(shape)


def _alloc_step(d, shape, dtype):
    def run(slots, ctx):
        slots[d] = torch.empty(_resolve(shape, ctx), dtype=dtype, device=ctx.device)
        if ctx.record is not None:
            ctx.record.trace.append(("alloc", d, _resolve(shape, ctx), dtype))

    return run


def _view_step(s, d, shape):
    def run(slots, ctx):
        t, size = slots[s], _resolve(shape, ctx)
        slots[d] = t.view(size) if t.is_contiguous() else t.reshape(size)
        if ctx.record is not None:
            ctx.record.trace.append(("view", s, d, size, "view" if t.is_contiguous() else "reshape"))

    return run


def _permute_step(s, d, perm):
    def run(slots, ctx):
        slots[d] = slots[s].permute(perm)
        if ctx.record is not None:
            ctx.record.trace.append(("permute", s, d, perm))

    return run


def _slice_step(op, s, d):
    offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
    sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
    strides = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
    if len(op.operands) != 1 or any(x < 0 for x in offsets + sizes + strides):
        try:  # symbolic offsets or sizes (uniorch/ir/dims.py): evaluated per call
            parts = dims.slice_operands(op)
        except dims.UnknownSize as err:
            raise PlanError(op, f"dynamic slice offsets or sizes: {err}") from None
        shape = _shape(op.results[0])

        def run_symbolic(slots, ctx):
            o, n, st = ([dims.evaluate(x, ctx.sizes) for x in parts[k]] for k in ("offsets", "all_sizes", "strides"))
            index = tuple(slice(a, a + (b - 1) * c + 1, c) for a, b, c in zip(o, n, st))
            slots[d] = slots[s][index].reshape(_resolve(shape, ctx))

        return run_symbolic
    shape = shape_of(op.results[0].type)
    index = tuple(slice(o, o + (n - 1) * st + 1, st) for o, n, st in zip(offsets, sizes, strides))

    def run(slots, ctx):
        slots[d] = slots[s][index].reshape(shape)  # a view: rank-reducing slices only drop unit dims
        if ctx.record is not None:
            ctx.record.trace.append(("slice", s, d, index, shape))

    return run


_RESOURCE = re.compile(r'^\s*([\w.\-]+): "0x([0-9A-Fa-f]*)"', re.M)


def resource_blobs(module: ir.Module) -> dict[str, bytes]:
    """`dense_resource<name>` payloads of a module, read from its textual form.

    torch-mlir stores tensor literals (e.g. upsampling's index tables) as dialect resources, whose
    bytes the Python bindings do not expose; the printed form does: a hex blob whose first four
    bytes are the alignment (docs: MLIR LangRef, "Dialect resources").
    """
    text = str(module)
    section = text.split("dialect_resources:", 1)
    if len(section) < 2:
        return {}
    return {name: bytes.fromhex(blob)[4:] for name, blob in _RESOURCE.findall(section[1])}


def _const_step(op, d, blobs=None):
    attr = op.attributes["value"]
    t = op.results[0].type
    dtype, shape = torch_dtype(t), shape_of(t)
    if isinstance(attr, ir.DenseResourceElementsAttr) or str(attr).startswith("dense_resource<"):
        name = str(attr)[len("dense_resource<"):].split(">")[0]
        if not blobs or name not in blobs:
            raise PlanError(op, f"constant resource '{name}' has no data")
        host = torch.frombuffer(bytearray(blobs[name]), dtype=dtype).reshape(shape).clone()
    elif ir.DenseElementsAttr(attr).is_splat:
        value = ir.DenseElementsAttr(attr).get_splat_value()
        scalar = value.value if hasattr(value, "value") else float(str(value).split(":")[0])
        host = torch.full(shape, scalar, dtype=dtype)
    else:
        host = torch.from_numpy(np.array(attr).copy()).to(dtype).reshape(shape)
    cache: dict = {}

    def run(slots, ctx):
        dev = ctx.device
        if dev not in cache:
            cache[dev] = host.to(dev)
        slots[d] = cache[dev]
        if ctx.record is not None:
            ctx.record.trace.append(("const", d, slots[d]))

    return run


def device_of(inputs: list, default=None):
    """Where the kernels run: the first input off the CPU; else the CPU if a CPU tensor with
    elements is among them; else `default` (the device the capture recorded for the region's
    results). 0-d CPU tensors decide nothing: PyTorch lets such scalars join GPU ops, and a region
    computed from them and loop indices alone (a causal mask's `arange`s) belongs on the GPU."""
    if inputs:  # the model's first input decides when off the CPU (the common GPU call)
        dev = getattr(inputs[0], "device", None)
        if dev is not None and dev.type != "cpu":
            return dev
    cpu = False
    for t in inputs:
        dev = getattr(t, "device", None)
        if dev is None:
            continue
        if dev.type != "cpu":
            return dev
        cpu = cpu or t.dim() > 0
    if cpu or default is None:
        return torch.device("cpu")
    return default


__all__ = ["LaunchPlan", "Kernel", "PlanError", "build_plan", "CodegenError", "device_of"]
