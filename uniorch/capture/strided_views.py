"""`as_strided` calls that are plain reshapes, recorded as views.

PyTorch's GroupNorm decomposition ends with `as_strided(scale, [N, C], [C, 1])` of a contiguous
`[N, G, C/G, 1]` tensor: the same elements in the same order. torch-mlir lowers `as_strided` as a
gather whose index tables (one int64 tensor per input dim, per output element) are constants of the
module: every GroupNorm was a kernel of its own reading them (UNet: ten such kernels). A view
lowers to a `collapse_shape`/`expand_shape` that fusion reads through.

Rewritten: `as_strided(x, size, stride[, offset])` where x is contiguous, has as many elements as
`size`, the offset is x's own (or not given), and `stride` is the contiguous stride of `size`
(size-1 dims aside). Anything else keeps the gather.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _contiguous_strides(size) -> list[int]:
    out, step = [], 1
    for n in reversed(size):
        out.append(step)
        step *= n
    return out[::-1]


def _plain_reshape(node: torch.fx.Node) -> bool:
    x = node.args[0]
    val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    size, stride = list(node.args[1]), list(node.args[2])
    offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
    if not isinstance(val, torch.Tensor) or not all(isinstance(v, int) for v in (*size, *stride, *val.shape)):
        return False
    if not val.is_contiguous() or val.numel() != torch.Size(size).numel():
        return False
    if offset is not None and offset != val.storage_offset():
        return False
    want = _contiguous_strides(size)
    return all(n == 1 or s == w for n, s, w in zip(size, stride, want))


def as_strided_as_views(gm: torch.fx.GraphModule) -> int:
    """Rewrites every reshape-like `as_strided` into `aten.view`; returns how many."""
    done = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is aten.as_strided.default and _plain_reshape(node):
            with gm.graph.inserting_before(node):
                view = gm.graph.call_function(aten.view.default, (node.args[0], list(node.args[1])))
            view.meta = dict(node.meta)
            node.replace_all_uses_with(view)
            gm.graph.erase_node(node)
            done += 1
    if done:
        gm.recompile()
    return done
