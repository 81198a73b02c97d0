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


def _expr(v):
    """A size as a sympy expression: an int, a SymInt, or a graph node computing one (a symbolic
    capture's `sym_size` and its arithmetic); None for anything else."""
    import sympy

    if isinstance(v, torch.fx.Node):
        v = v.meta.get("val")
    if isinstance(v, torch.SymInt):
        return v.node.expr
    return sympy.Integer(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _plain_reshape(node: torch.fx.Node) -> bool:
    """Also at symbolic sizes (the batch of a GroupNorm's `[N, C]`): compared as expressions,
    so no guard is added (a SymInt's `==` would specialize)."""
    import sympy

    x = node.args[0]
    val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return False
    size = [_expr(v) for v in node.args[1]]
    stride = [_expr(v) for v in node.args[2]]
    shape, strides = [_expr(v) for v in val.shape], [_expr(v) for v in val.stride()]
    if any(e is None for e in (*size, *stride, *shape, *strides)):
        return False
    offset = node.args[3] if len(node.args) > 3 else node.kwargs.get("storage_offset")
    if offset is not None and _expr(offset) != _expr(val.storage_offset()):
        return False

    def same(a, b) -> bool:
        return sympy.expand(a - b) == 0

    def contiguous(dims, steps) -> bool:
        return all(same(n, 1) or same(s, w) for n, s, w in zip(dims, steps, _contiguous_strides(dims)))

    return (contiguous(shape, strides) and same(sympy.Mul(*shape), sympy.Mul(*size))
            and contiguous(size, stride))


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
