"""A gather reads the narrow tensor and widens what it read, part of `uniorch-preprocess`.

A 16-bit model's adaptive pooling or embedding-style read is a `tensor.extract` inside a body from
the float32 widening of a bf16 tensor (torch computes those ops in float32). The widening is then a
tensor of its own: the kernel computing the bf16 value writes a float32 copy next to it, twice the
bytes, for the gather to read. Extracting from the bf16 tensor and widening the element read
instead leaves the copy without readers.
"""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import tensor

from uniorch.codegen import patterns as pat

_WIDENING = ("arith.extf", "arith.extsi", "arith.extui", "arith.sitofp", "arith.uitofp")


def extract_before_casts(func_op: ir.Operation) -> int:
    """Rewrites each extract from a widened tensor; returns how many."""
    done = 0
    block = func_op.regions[0].blocks[0]
    for op in [o.operation for o in block.operations]:
        if op.name != "linalg.generic":
            continue
        for x in [o for o in pat.body_ops(op) if o.name == "tensor.extract"]:
            cast = _widening(x.operands[0])
            if cast is None:
                continue
            src, body_cast = cast
            with ir.InsertionPoint(x), x.location:
                narrow = tensor.ExtractOp(src, list(x.operands)[1:]).result
                wide = pat.op_of(body_cast.clone())
            wide.operands[0] = narrow
            x.results[0].replace_all_uses_with(wide.results[0])
            x.erase()
            done += 1
    if done:
        for op in reversed([o.operation for o in block.operations]):
            if op.name == "linalg.generic" and _widening_generic(op) and not list(op.results[0].uses):
                op.erase()
    return done


def _widening_generic(g: ir.Operation):
    """The cast op of a one-input, identity-mapped generic that only widens its input, else None."""
    if len(g.results) != 1 or pat.num_inputs(g) != 1 or not pat.is_pointwise(g):
        return None
    n = len(pat.iterator_types(g))
    if any(m != ir.AffineMap.get_identity(n) for m in pat.indexing_maps(g)):
        return None
    ops = list(pat.body_ops(g))
    body = pat.body(g)
    if len(ops) != 1 or ops[0].name not in _WIDENING or ops[0].operands[0] != body.arguments[0]:
        return None
    if pat.yield_op(g).operands[0] != ops[0].results[0]:
        return None
    return ops[0]


def _widening(v: ir.Value):
    """(narrow source, cast op) when v is a widening generic's result."""
    if isinstance(v.owner, ir.Block):
        return None
    g = pat.op_of(v.owner)
    if g.name != "linalg.generic":
        return None
    cast = _widening_generic(g)
    if cast is None:
        return None
    src = pat.inputs(g)[0]
    if not isinstance(src.type, ir.RankedTensorType):
        return None
    return src, cast
