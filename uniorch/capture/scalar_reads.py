"""`x / t.item()`: a tensor's value read to Python and used as the scalar of tensor arithmetic,
kept on the device as the 0-d tensor it was read from.

Why: the read is a `_local_scalar_dense` whose float feeds `div.Tensor` & co. as a scalar; codegen
takes no float kernel argument and the launch plan cannot run the read, so the read and every op
it fed ran eagerly (a normalization by `x.abs().max().item()` was three eager ops). Where the
other operand has the 0-d tensor's dtype, float32 or float64, the op computes the same in either
form: the Python float holds the tensor's value exactly, and the arithmetic runs in that dtype
both ways (16-bit types are left: their ops take a Python scalar at fp32, a 0-d tensor at 16
bits). A read with another use stays, the value still read where that use needs it."""
from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten
_ARITHMETIC = {aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor}
_EXACT = (torch.float32, torch.float64)


def _tensor_val(node):
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def scalar_reads_as_tensors(gm: fx.GraphModule) -> int:
    """Rewrites the uses described above in place; the number of operands rewritten."""
    rewritten = 0
    for read in [n for n in gm.graph.nodes if n.op == "call_function" and n.target == aten._local_scalar_dense.default]:
        source = read.args[0]
        val = _tensor_val(source)
        if val is None or val.dim() != 0 or val.dtype not in _EXACT:
            continue
        for user in list(read.users):
            if user.op != "call_function" or user.target not in _ARITHMETIC or read in user.kwargs.values():
                continue
            others = [a for a in user.args[:2] if a is not read]
            other = _tensor_val(others[0]) if len(others) == 1 else None
            if other is None or other.dtype != val.dtype:
                continue
            user.args = tuple(source if a is read else a for a in user.args)
            rewritten += 1
        if not read.users:
            gm.graph.erase_node(read)
    if rewritten:
        gm.graph.lint()
        gm.recompile()
    return rewritten
