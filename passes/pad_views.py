"""`collapse_shape(pad(x))` → `pad(collapse_shape(x))`, part of `uniorch-preprocess`.

torch-mlir lowers a grouped convolution on a tensor that an earlier grouped convolution produced
in its [N, G, C/G, H, W] form by padding that 5-D value and collapsing it back to [N, C, H, W].
Fusion folds a constant `tensor.pad` into the convolution reading it (masked loads, no padded copy)
only when the pad feeds the convolution directly; with the collapse in between the pad would stay a
copy kernel of its own. When every collapsed group pads nothing but its (single) non-unit dim, the
pad commutes with the collapse: collapse first (a view), pad the collapsed tensor.
"""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import tensor

from uniorch.codegen import patterns as pat


def pad_after_collapse(func_op: ir.Operation) -> None:
    block = func_op.regions[0].blocks[0]
    for op in [o.operation for o in block.operations]:
        if op.name == "tensor.collapse_shape":
            _swap(op)


def _static_ints(attr) -> list[int] | None:
    vals = list(ir.DenseI64ArrayAttr(attr))
    return None if any(v < 0 for v in vals) else vals  # dynamic entries are negative sentinels


def _swap(collapse: ir.Operation) -> None:
    src = collapse.operands[0]
    if isinstance(src.owner, ir.Block):
        return
    pad = pat.op_of(src.owner)
    if pad.name != "tensor.pad" or len(pad.operands) != 1 or len(list(pad.results[0].uses)) != 1:
        return  # dynamic pad amounts, or the padded value is used elsewhere too
    if pad_value(pad) is None:
        return
    low = _static_ints(pad.attributes["static_low"])
    high = _static_ints(pad.attributes["static_high"])
    if low is None or high is None:
        return
    src_t = ir.RankedTensorType(pad.operands[0].type)
    out_t = ir.RankedTensorType(collapse.results[0].type)
    if not (src_t.has_static_shape and out_t.has_static_shape):
        return
    groups = [[ir.IntegerAttr(i).value for i in ir.ArrayAttr(g)]
              for g in ir.ArrayAttr(collapse.attributes["reassociation"])]
    new_low, new_high = [], []
    for g in groups:
        padded = [d for d in g if low[d] or high[d]]
        if padded and any(src_t.shape[d] != 1 for d in g if d != padded[0]) or len(padded) > 1:
            return  # padding inside a merged group is not a pad of the merged dim
        new_low.append(low[padded[0]] if padded else 0)
        new_high.append(high[padded[0]] if padded else 0)
    shape = [1] * len(groups)
    for i, g in enumerate(groups):
        for d in g:
            shape[i] *= src_t.shape[d]
    with ir.InsertionPoint(collapse), collapse.location:
        flat_t = ir.RankedTensorType.get(shape, src_t.element_type)
        flat = tensor.CollapseShapeOp(flat_t, pad.operands[0], collapse.attributes["reassociation"]).result
        new = pat.op_of(pad.clone())
    new.operands[0] = flat
    new.attributes["static_low"] = ir.DenseI64ArrayAttr.get(new_low)
    new.attributes["static_high"] = ir.DenseI64ArrayAttr.get(new_high)
    new.results[0].set_type(out_t)
    # the pad's region takes one index per dim (unused: checked above); drop the extra ones
    region_block = new.regions[0].blocks[0]
    while len(region_block.arguments) > len(groups):
        region_block.erase_argument(len(region_block.arguments) - 1)
    collapse.results[0].replace_all_uses_with(new.results[0])
    collapse.erase()
    pad.erase()


def pad_value(pad: ir.Operation):
    """The scalar a `tensor.pad` fills with when it is one value defined outside its region (no
    dependence on the index), else None."""
    blk = pad.regions[0].blocks[0]
    ops = [pat.op_of(o) for o in blk.operations]
    if len(ops) != 1 or ops[0].name != "tensor.yield":
        return None
    v = ops[0].operands[0]
    if isinstance(v.owner, ir.Block):
        return None
    return v
