"""uniorch-schedule: outline each fused group into its own kernel function, with its schedule.

Input: `@main` whose ops carry `uniorch.group = N` (uniorch-fuse). Output (docs/kernels.md §3):
`func.func private @kN_<kind>(inputs) -> results {uniorch.kernel, uniorch.kind, uniorch.domain,
uniorch.schedule}` per group, and `@main` calling them in a valid order. Scalar constants and
`tensor.empty` (a shape, not data) are cloned into the kernel instead of becoming arguments.
The schedule (block sizes, warps, stages, grid) comes from the code generator for the kernel's
kind and the target, because only it knows what its template can use.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir
from torch_mlir.dialects import arith, func, tensor

from uniorch.ir import dims

from .base import Pass, PassContext
from .ir_utils import erase_dead_pure_ops, main_func, nested_ops, topological_sort

GROUP = "uniorch.group"


@dataclass(frozen=True)
class Schedule(Pass):
    name = "uniorch-schedule"
    summary = "outline each fused group as a kernel function carrying its schedule (per target)"
    target: str = ""

    def run(self, module, pctx: PassContext) -> None:
        target = self.target or pctx.target or "interpret"
        main = main_func(module)
        block = main.regions[0].blocks[0]
        groups: dict[int, list[ir.Operation]] = {}
        for op in block.operations:
            if GROUP in op.attributes:
                groups.setdefault(ir.IntegerAttr(op.attributes[GROUP]).value, []).append(op.operation)
        for n in sorted(groups):
            kernel = _outline(module, main, groups[n], n, pctx.kernel_prefix)
            _stamp_fp32_dots(kernel, pctx.fp32_dots)
            _attach_schedule(kernel, target)
        topological_sort(block)
        erase_dead_pure_ops(block)


RESHAPES = ("tensor.expand_shape", "tensor.collapse_shape")
# views of a `tensor.empty` are shapes too; the launch plan has no value for an empty tensor, so
# a view of one left in @main would read a value no step produces (circular padding inserts into
# `extract_slice(tensor.empty)`)
SHAPE_VIEWS = RESHAPES + ("tensor.extract_slice",)


def _clonable(op: ir.Operation) -> bool:
    """Defined outside but cheaper to recreate inside than to pass: scalar constants and shapes
    (`tensor.empty`, also reshaped or sliced: elementwise fusion leaves `expand_shape(tensor.empty)`
    inits)."""
    if op.name == "tensor.empty":
        return True
    if op.name in SHAPE_VIEWS and (len(op.operands) == 1 or op.name == "tensor.expand_shape"):  # + its sizes
        src = op.operands[0].owner
        return not isinstance(src, ir.Block) and _clonable(src)
    return op.name == "arith.constant" and not isinstance(op.results[0].type, ir.ShapedType)


def _clone_into(v, mapping: dict):
    """Clones the op defining `v` (and, for reshapes, its clonable source) at the insertion point."""
    if v in mapping:
        return mapping[v]
    op = v.owner
    if op.name in SHAPE_VIEWS:  # a reshaped or sliced empty tensor is an empty tensor of its shape
        t = ir.RankedTensorType(v.type)
        mapping[v] = tensor.EmptyOp(list(t.shape), t.element_type).result
        return mapping[v]
    mapping[v] = op.clone().results[0]
    return mapping[v]


def _top_level(op: ir.Operation, main) -> ir.Operation:
    while op.parent is not None and op.parent != main.operation:
        op = op.parent
    return op


def _outline(module, main, ops: list[ir.Operation], n: int, prefix: str = "") -> ir.Operation:
    members = set(ops)
    entry = main.regions[0].blocks[0]

    def outside(value) -> bool:
        owner = value.owner
        if isinstance(owner, ir.Block):
            return owner == entry
        return _top_level(owner, main) not in members

    # Values the group reads from outside, in first-use order; and nested uses to rewire.
    inputs, clones, uses = [], [], []
    for op in ops:
        for inner in nested_ops(op):
            for i, v in enumerate(inner.operands):
                if not outside(v):
                    continue
                uses.append((inner, i, v))
                producer = v.owner if not isinstance(v.owner, ir.Block) else None
                if producer is not None and _clonable(producer):
                    if v not in clones:
                        clones.append(v)
                elif v not in inputs:
                    inputs.append(v)
    results = []
    for op in ops:
        for r in op.results:
            if any(_top_level(u.owner, main) not in members for u in r.uses):
                results.append(r)

    kind = next((ir.StringAttr(o.attributes["uniorch.kind"]).value for o in ops if "uniorch.kind" in o.attributes), "pointwise")
    name = f"{prefix}k{n}_{kind}"
    symbolic = dims.has_symbols(main)
    with module.context, ops[-1].location:
        anchor_after = _next_op(ops[-1])
        # a shape with symbolic sizes is recreated inside from index arguments: `tensor.dim`s of it
        # in @main, which only keep the IR valid (kernels take the size symbols: uniorch/ir/dims.py)
        sized = []  # (clone value, its dims, the index values in @main)
        if symbolic:
            with ir.InsertionPoint(anchor_after):
                for v in clones:
                    if not isinstance(v.type, ir.RankedTensorType):
                        continue
                    t = ir.RankedTensorType(v.type)
                    if not t.has_static_shape:
                        dyn = [d for d, s in enumerate(t.shape) if s < 0]
                        sized.append((v, dims.shape(v), [tensor.DimOp(v, arith.ConstantOp(ir.IndexType.get(), d).result).result
                                                         for d in dyn]))
        extra = [i for _, _, idx in sized for i in idx]
        ftype = ir.FunctionType.get([v.type for v in inputs] + [i.type for i in extra], [r.type for r in results])
        with ir.InsertionPoint(main.operation):
            kernel = func.FuncOp(name, ftype, visibility="private")
        body = kernel.add_entry_block()
        mapping = dict(zip(inputs, body.arguments))
        if symbolic:
            arg_dims = [dims.shape(v) if isinstance(v.type, ir.RankedTensorType)
                        else _scalar_dims(v) for v in inputs]
            idx_args = iter(body.arguments[len(inputs):])
            with ir.InsertionPoint(body):
                for v, sizes, idx in sized:
                    t = ir.RankedTensorType(v.type)
                    shape = [s if s >= 0 else next(idx_args) for s in t.shape]
                    mapping[v] = tensor.EmptyOp(shape, t.element_type).result
                    arg_dims += [[sizes[d]] for d, s in enumerate(t.shape) if s < 0]
            dims.set_arg_dims(kernel.operation, arg_dims)
            if "uniorch.size_hints" in main.attributes:
                kernel.operation.attributes["uniorch.size_hints"] = main.attributes["uniorch.size_hints"]
        with ir.InsertionPoint(body):
            for v in clones:
                _clone_into(v, mapping)
            ret = func.ReturnOp(results)
        for op in ops:
            op.move_before(ret)
        for inner, i, v in uses:
            inner.operands[i] = mapping[v]
        with ir.InsertionPoint(anchor_after):
            call = func.CallOp([r.type for r in results], ir.FlatSymbolRefAttr.get(name), inputs + extra)
        for r, new in zip(results, call.results):
            for use in list(r.uses):
                if not _inside(use.owner, kernel.operation):
                    use.owner.operands[use.operand_number] = new
        kernel.attributes["uniorch.kernel"] = ir.UnitAttr.get()
        kernel.attributes["uniorch.kind"] = ir.StringAttr.get(kind)
        for o in ops:
            if "uniorch.domain" in o.attributes:
                kernel.attributes["uniorch.domain"] = o.attributes["uniorch.domain"]
                break
        call.attributes["uniorch.group"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), n)
    return kernel.operation


def _scalar_dims(v) -> list:
    """A scalar kernel input that is a size (index, or an integer computed from sizes), or a float
    computed from sizes (a mean's 1 / n): [its expression]."""
    if isinstance(v.type, (ir.IndexType, ir.IntegerType, ir.F64Type, ir.F32Type)):
        try:
            return [dims.index_value(v)]
        except dims.UnknownSize:
            return []
    return []


def _inside(op: ir.Operation, ancestor: ir.Operation) -> bool:
    while op is not None:
        if op == ancestor:
            return True
        op = op.parent
    return False


def _next_op(op: ir.Operation) -> ir.Operation:
    found = False
    for o in op.block.operations:
        if found:
            return o.operation
        if o.operation == op:
            found = True
    raise AssertionError("an op of @main is always followed by its terminator")


def _stamp_fp32_dots(kernel: ir.Operation, fp32_dots: dict) -> None:
    """`fp32_dots` (PassContext) by the kernel's kind; a contraction kernel that is a convolution
    (an implicit GEMM: some factor read through a window) under "convolution"."""
    from uniorch.codegen.patterns import FP32_DOT, is_convolution, is_generic, recomputes_probabilities

    if not fp32_dots:
        return
    kind = ir.StringAttr(kernel.attributes["uniorch.kind"]).value if "uniorch.kind" in kernel.attributes else ""
    if kind == "contraction" and "convolution" in fp32_dots and any(
            is_generic(op) and is_convolution(op) for op in kernel.regions[0].blocks[0].operations):
        kind = "convolution"
    mode = fp32_dots.get(kind, fp32_dots.get("*"))
    if kind == "chain" and recomputes_probabilities(kernel):
        # an attention backward's chain: the attention's precision (3xTF32 unless PyTorch's
        # matmul precision allows TF32, or its memory-efficient kernel is off), not a matmul's
        mode = fp32_dots.get("attention", fp32_dots.get("*", "tf32x3"))
    if mode:
        kernel.attributes[FP32_DOT] = ir.StringAttr.get(mode, kernel.context)


def _attach_schedule(kernel: ir.Operation, target: str) -> None:
    from uniorch.codegen import CodegenError, choose_schedule

    with kernel.context:
        try:
            sched = choose_schedule(kernel, target)
        except (CodegenError, ImportError) as err:  # the runtime runs this region eagerly instead
            kernel.attributes["uniorch.unsupported"] = ir.StringAttr.get(str(err))
            return
        kernel.attributes["uniorch.schedule"] = ir.DictAttr.get({k: _attr(v) for k, v in sched.items()})


def _attr(v):
    if isinstance(v, bool):
        return ir.BoolAttr.get(v)
    if isinstance(v, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)
    if isinstance(v, (list, tuple)):
        return ir.ArrayAttr.get([_attr(x) for x in v])
    return ir.StringAttr.get(str(v))
