"""Each output's layout as eager PyTorch returns it, kept through decomposition.

Export traces the model's ATen ops, whose meta functions give each result eager's strides; the
decomposition that follows may compute a value in another layout. PyTorch's fused attention ops
return their output (B, H, T, d) as a transpose of a (B, T, H, d) tensor, while the math they
decompose to writes (B, H, T, d) contiguous. Where the compiler may return a view rather than a
copy (passes/returned_views.py), it must know eager's layout and which outputs eager returns as
views of one storage: recorded here on the decomposed graph's output nodes, from the program
before decomposition.
"""
from __future__ import annotations

from typing import Optional

import torch

EAGER_LAYOUT = "uniorch_eager_layout"  # node.meta: (shape, strides, offset, storage key) or None


def output_layouts(gm: torch.fx.GraphModule) -> list[Optional[tuple]]:
    """Per output of `gm`: (shape, strides, storage offset, storage key), None where not a tensor
    of static layout. Outputs with one storage key view one storage."""
    from torch.multiprocessing.reductions import StorageWeakRef

    out = []
    for a in gm.graph.output_node().args[0]:
        val = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or not all(
                isinstance(s, int) for s in (*val.shape, *val.stride(), val.storage_offset())):
            out.append(None)
            continue
        try:
            key = StorageWeakRef(val.untyped_storage()).cdata
        except Exception:  # noqa: BLE001 - a tensor without storage (sparse, a subclass)
            key = None
        out.append((tuple(val.shape), tuple(val.stride()), int(val.storage_offset()), key))
    return out


def mark(gm: torch.fx.GraphModule, layouts: list) -> None:
    """Records `layouts` (from `output_layouts` of the program before decomposition) on the output
    nodes of `gm` where shapes agree; a node returned twice with two layouts gets none."""
    outs = gm.graph.output_node().args[0]
    if len(outs) != len(layouts):
        return
    for node, lay in zip(outs, layouts):
        if not isinstance(node, torch.fx.Node):
            continue
        val = node.meta.get("val")
        if lay is None or not isinstance(val, torch.Tensor) or tuple(val.shape) != lay[0]:
            lay = None
        if EAGER_LAYOUT in node.meta and node.meta[EAGER_LAYOUT] != lay:
            lay = None
        node.meta[EAGER_LAYOUT] = lay


__all__ = ["EAGER_LAYOUT", "output_layouts", "mark"]
