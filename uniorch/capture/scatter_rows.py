"""`scatter_add` along dim 0 with an index expanded along the other dims, as a row-wise
`index_put(..., accumulate=True)`.

Graph networks sum messages into nodes this way (PyTorch Geometric's `scatter` broadcasts the
edge index to the messages' shape: `out.scatter_add(0, index[:, None].expand_as(msg), msg)`).
torch-mlir lowers scatter_add with one coordinate pair per element: an `[E·F, 2]` index tensor and
the messages flattened, both written by kernels of their own. The same sum as an index_put of
whole rows takes `[E, 1]` indices and the messages as `[E, F]` updates, which the scatter kernel
computes itself (passes/fuse_scatter.py). The rewrite is structural (the index is an
`expand` in the graph, so every call has the same form); it needs static sizes, and leaves
anything else as it was.
"""
from __future__ import annotations

import torch

from .symbolic_views import _set_tensor_meta

aten = torch.ops.aten


def _shape(node) -> list | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or not all(isinstance(n, int) for n in val.shape):
        return None
    return list(val.shape)


def scatter_add_rows(gm: torch.fx.GraphModule) -> int:
    """Rewrites each such scatter_add; returns how many."""
    done = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.scatter_add.default:
            continue
        x, dim, index, src = node.args
        xs, idx_s, src_s = _shape(x), _shape(index), _shape(src)
        if xs is None or idx_s is None or src_s is None or not xs or dim % len(xs) != 0:
            continue
        if not (isinstance(index, torch.fx.Node) and index.target is aten.expand.default):
            continue
        base = index.args[0]
        bs = _shape(base)
        if bs is None or len(bs) != len(xs) or any(n != 1 for n in bs[1:]) or bs[0] != idx_s[0]:
            continue
        if idx_s != src_s or idx_s[1:] != xs[1:]:
            continue  # scatter_add may take part of src, or of the other dims: not whole rows
        with gm.graph.inserting_before(node):
            flat = gm.graph.call_function(aten.view.default, (base, [bs[0]]))
            flat.meta["val"] = base.meta["val"].view(bs[0])
            _set_tensor_meta(flat)
            put = gm.graph.call_function(aten.index_put.default, (x, [flat], src, True))
        put.meta = dict(node.meta)
        node.replace_all_uses_with(put)
        gm.graph.erase_node(node)
        done += 1
    if done:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return done
