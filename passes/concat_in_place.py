"""uniorch-concat-in-place: kernels write a concatenation's pieces where the concatenation keeps them.

A concatenation that no kernel could read piece by piece is a copy kernel of its own: a training
step's backward concatenates dq, dk and dv for the qkv projection's two products (GPT-2 small's
block at 8 x 1024 tokens: 151 MB moved, read and written once each). Here, as Inductor's
ConcatKernel does, each piece's producer writes its result straight into its slice of the
concatenation's buffer, and the copy goes: the call becomes a `tensor.concat` in `@main`, which
uniorch-plan-memory gives the pieces' buffer and the launch plan reads as that buffer
(runtime/plan.py). The producers take their output strides as arguments, so a slice is written as
any result is.

Only when the copy kernel is the concatenation alone, and each piece is (through reshapes in
`@main`) a result of another kernel that nothing else reads, written anew (not in place), with
static sizes, and whose slice of the buffer can be viewed in the shape the kernel writes.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir
from torch_mlir.dialects import tensor

from .base import Pass, PassContext
from .ir_utils import contiguous_strides, main_func, merge_strides, reassociation_groups, split_strides

RESHAPES = ("tensor.expand_shape", "tensor.collapse_shape")
# kernels whose stores address each result through the strides they are given
_WRITERS = ("pointwise", "reduction", "contraction", "chain", "attention")


@dataclass(frozen=True)
class ConcatInPlace(Pass):
    name = "uniorch-concat-in-place"
    summary = "a concatenation's pieces written into its buffer by their kernels: no copy kernel"

    def run(self, module, pctx: PassContext) -> None:
        main = main_func(module)
        kernels = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in
                   (o.operation for o in module.body.operations)
                   if op.name == "func.func" and "uniorch.kernel" in op.attributes}
        for call in [o.operation for o in main.regions[0].blocks[0].operations]:
            if call.name != "func.call":
                continue
            callee = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
            cat = _only_concat(kernels.get(callee))
            if cat is None:
                continue
            args = list(kernels[callee].regions[0].blocks[0].arguments)
            pieces = [call.operands[args.index(v)] for v in cat.operands]
            if not _pieces_in_place(pieces, cat, kernels):
                continue
            with call.context, call.location, ir.InsertionPoint(call):
                dim = ir.IntegerAttr(cat.attributes["dim"]).value
                joined = tensor.ConcatOp(call.results[0].type, dim, pieces)
            call.results[0].replace_all_uses_with(joined.result)
            call.erase()
            if not _called(main, callee):
                kernels.pop(callee).erase()


def _only_concat(kernel):
    """The kernel's `tensor.concat` when its body is that alone, of its arguments each once."""
    if kernel is None or "uniorch.inplace" in kernel.attributes:
        return None
    block = kernel.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    if len(ops) != 2 or ops[0].name != "tensor.concat" or ops[1].name != "func.return":
        return None
    cat, ret = ops
    args = list(block.arguments)
    if len(ret.operands) != 1 or ret.operands[0] != cat.results[0] or len(cat.operands) != len(args) \
            or any(v not in args for v in cat.operands) or len(set(map(_key, cat.operands))) != len(args):
        return None
    return cat


def _key(v):
    return ir.BlockArgument(v).arg_number


def _called(main, callee: str) -> bool:
    ops = (o.operation for o in main.regions[0].blocks[0].operations)
    return any(o.name == "func.call" and ir.FlatSymbolRefAttr(o.attributes["callee"]).value == callee for o in ops)


def _pieces_in_place(pieces: list, cat, kernels: dict) -> bool:
    t = ir.RankedTensorType(cat.results[0].type)
    if not t.has_static_shape:
        return False
    dim = ir.IntegerAttr(cat.attributes["dim"]).value
    strides = contiguous_strides(t.shape)
    seen = []
    for p in pieces:
        chain, r = _producer(p)
        if r is None or any(r == s for s in seen) or not ir.RankedTensorType(r.type).has_static_shape:
            return False
        seen.append(r)
        call = r.owner.operation if hasattr(r.owner, "operation") else r.owner
        kernel = kernels.get(ir.FlatSymbolRefAttr(call.attributes["callee"]).value)
        if kernel is None or "uniorch.inplace" in kernel.attributes \
                or ir.StringAttr(kernel.attributes["uniorch.kind"]).value not in _WRITERS:
            return False
        if not _viewable(chain, list(ir.RankedTensorType(p.type).shape), list(strides)):
            return False
    return True


def _producer(v):
    """(reshapes from a kernel's result to v, innermost last; that result), the result None where
    v is not one through reshapes only, or anything else reads the way."""
    chain = []
    while True:
        if len(list(v.uses)) != 1 or isinstance(v.owner, ir.Block):
            return chain, None
        op = v.owner.operation if hasattr(v.owner, "operation") else v.owner
        if op.name == "func.call":
            return chain, v
        if op.name not in RESHAPES:
            return chain, None
        chain.append(op)
        v = op.operands[0]


def _viewable(chain: list, shape: list[int], strides: list[int]) -> bool:
    """Whether the slice (shape, strides in the buffer) is viewed back through `chain`'s reshapes
    (the last one first) without a copy: splitting a dim always is; merging dims needs each to
    step over the next."""
    for op in chain:
        groups = reassociation_groups(op)
        src = list(ir.RankedTensorType(op.operands[0].type).shape)
        if op.name == "tensor.collapse_shape":  # the kernel's dims g became our dim j: split j back
            strides = split_strides(groups, strides, src)
        else:  # expanded: our dims g were the kernel's dim j; merge them back
            strides = merge_strides(groups, strides, shape)
            if strides is None:
                return False
        shape = src
    return True
