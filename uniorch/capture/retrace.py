"""Tracing a captured graph again through a Python function of its inputs (an interpreter that
rewrites some ops as it runs them), the shared half of complex_pairs.py and flex_math.py.

At symbolic sizes the examples are made in the capture's own fake mode and traced there, so the
new graph keeps the capture's symbols (example tensors of number sizes fail on symbolic ones)."""
from __future__ import annotations

import contextlib
from typing import Callable, Optional

import torch
import torch.fx as fx
from torch.fx import traceback as fx_traceback


def placeholder_values(gm: fx.GraphModule) -> Optional[list]:
    """The placeholders' example values, or None where one is not a tensor (nothing to retrace)."""
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    return vals if all(isinstance(v, torch.Tensor) for v in vals) else None


def retrace(fn: Callable, vals: list, example_of: Callable) -> fx.GraphModule:
    """`make_fx` of `fn` with the capture's decompositions, over `example_of(v)` per placeholder
    value; source locations carry over to the new nodes. Raises what tracing `fn` raises."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from .decompositions import decomposition_table

    symbolic = any(not isinstance(d, int) for v in vals for d in v.shape)
    fake_mode = torch._guards.detect_fake_mode(vals) if symbolic else None

    def mode():
        return fake_mode if fake_mode is not None else contextlib.nullcontext()

    with mode():
        examples = [example_of(v) for v in vals]
    with fx_traceback.preserve_node_meta(), mode():
        return make_fx(fn, decomposition_table=decomposition_table(),
                       tracing_mode="real" if fake_mode is not None else "fake")(*examples)


def renamed(gm: fx.GraphModule, new: fx.GraphModule) -> dict[str, str]:
    """Each placeholder's name in `gm` -> the name of its counterpart in `new`."""
    def names(g):
        return [n.name for n in g.graph.nodes if n.op == "placeholder"]

    return dict(zip(names(gm), names(new)))
