"""`flex_attention` as the attention it computes, written out, so it compiles.

`torch.nn.attention.flex_attention` is a higher-order op: its `score_mod` and the block mask's
`mask_mod` are FX subgraphs, which torch-mlir cannot import, so the whole attention ran in
PyTorch (on a CPU that is PyTorch's own dense reference; on a GPU, torch.compile generates the
kernel flex_attention needs to be fast at all). Here the captured graph is traced again with each
flex_attention call replaced by PyTorch's dense implementation of the op (`math_attention`: scores in
fp32, `score_mod` and `mask_mod` applied over the (batch, head, query, key) index grid, a safe
softmax, the value product; grouped-query heads repeated), inlining both subgraphs. The written-out
attention is the pattern uniorch-fuse-attention makes one flash kernel where score and mask are
elementwise in the indices, and compiles as separate kernels otherwise. The block mask's block
tables only skip blocks `mask_mod` masks whole, so the dense mask is the same attention.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.fx as fx
from torch.fx import traceback as fx_traceback

from .retrace import placeholder_values, renamed, retrace


def _is_flex(n: fx.Node) -> bool:
    return n.op == "call_function" and getattr(n.target, "__name__", "") == "flex_attention" \
        and isinstance(n.target, torch._ops.HigherOrderOperator)


class _DenseInterpreter(fx.Interpreter):
    def run_node(self, n: fx.Node) -> Any:
        with fx_traceback.set_current_meta(n):  # source locations carry over to the new nodes
            if not _is_flex(n):
                return super().run_node(n)
            from torch._higher_order_ops.flex_attention import math_attention

            args, kwargs = self.fetch_args_kwargs_from_env(n)
            out, lse, max_scores = math_attention(*args, **kwargs)
            return _like_query(out, args[0]), lse, max_scores


def _like_query(out: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """`out` laid out in memory as the query is (the op's own output layout, which views after
    it may rely on), as a permuted contiguous copy: `sdpa_dense` copies into an empty strided
    tensor, an in-place copy the capture cannot import."""
    order = sorted(range(query.dim()), key=lambda d: (query.stride(d), d), reverse=True)  # outermost first
    inverse = [order.index(d) for d in range(query.dim())]
    return out.permute(order).contiguous().permute(inverse)


def flex_as_math(cg) -> bool:
    """Rewrites `cg` (a CapturedGraph) in place without flex_attention calls. Returns whether it
    did; False leaves it untouched (none, or the retrace failed: the op stays in PyTorch)."""
    gm = cg.graph_module
    if not any(_is_flex(n) for n in gm.graph.nodes):
        return False
    vals = placeholder_values(gm)
    if vals is None:
        return False

    def dense(*flat):
        return tuple(_DenseInterpreter(gm).run(*flat))

    try:
        new = retrace(dense, vals, lambda v: torch.zeros(v.shape, dtype=v.dtype, device=v.device))
    except Exception:  # noqa: BLE001 - a score_mod the dense form cannot trace: PyTorch runs the op
        return False
    # the block mask's tables were computed for the op, and the dense form reads none of them
    new.graph.eliminate_dead_code(is_impure_node=lambda n: n.op in ("placeholder", "output"))
    new.recompile()
    names = renamed(gm, new)
    cg.graph_module = new
    cg.inputs = [dataclasses.replace(i, name=names[i.name]) for i in cg.inputs]
    return True
