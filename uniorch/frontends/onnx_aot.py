"""`uniorch.compile_aot(onnx_model, args, target=...)`: an ONNX model into the same bundle format.

The ONNX graph is imported with the example inputs' shapes fixed, compiled like one region of a
captured model, and each kernel taken through the target backend's stages. The bundle's program
is then placeholders → region_0 → outputs, so `uniorch.load` runs it like any bundle. ONNX
initializers are constants inside the region's MLIR, so there are no separate weights.

An ONNX bundle has no ATen ops to fall back on: a model uniorch cannot compile whole is an error
here (at compile time) rather than a bundle that would need onnxruntime on the target machine.
"""
from __future__ import annotations

import operator
import time
from typing import Any, Optional

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from . import onnx as fo


class _OnnxSignature(torch.nn.Module):
    """Stands in for the model in the bundle's signature: the ONNX graph's inputs, positionally."""

    def forward(self, *inputs):
        raise NotImplementedError


def compile_onnx_aot(model: Any, args, target, kwargs: Optional[dict] = None):
    from ..artifact import AotKernel, Artifact, through_backend
    from ..capture.graph import CapturedGraph, GraphInput, GraphOutput
    from ..ir import make_context
    from ..runtime.compiler import RegionError, compile_module
    from ..runtime.partition import Program, _Region
    from .onnx_model import OnnxModel, with_shapes

    timings: dict[str, float] = {}
    t = time.perf_counter()
    om = OnnxModel(model, target, fallback="error")
    flat = om._flat(tuple(args), dict(kwargs or {}))
    shapes = [tuple(x.shape) for x in flat]
    proto = with_shapes(om.proto, shapes)
    module = fo.to_linalg(proto, make_context())
    timings["import+lower"] = time.perf_counter() - t
    nodes = [n.name or n.op_type for n in proto.graph.node]
    try:
        cg = compile_module(module, target, run=False, input_specs=[(s, x.dtype) for s, x in zip(shapes, flat)],
                            all_nodes=nodes)
        through_backend(cg, target, nodes)
    except RegionError as err:
        raise fo.OnnxError(f"compile_aot of an ONNX model needs every node compiled for {target}; "
                           f"[{err.stage}] {err.reason}") from None
    timings.update(cg.timings)

    g = fx.Graph()
    names = [f"input_{i}" for i in range(len(flat))]
    placeholders = []
    for name, x in zip(names, flat):
        p = g.placeholder(name)
        p.meta["val"] = torch.empty(x.shape, dtype=x.dtype)
        placeholders.append(p)
    call = g.call_module("region_0", tuple(placeholders))
    outs = [g.call_function(operator.getitem, (call, i)) for i in range(len(om.outputs))]
    g.output(tuple(outs))
    root = torch.nn.Module()
    # no ATen graph behind the region: a kernel that fails to launch is an error, not a fallback
    root.add_module("region_0", _Region(cg, None, []))
    program = Program(fx.GraphModule(root, g), [cg], [], set(), timings)

    # the bundle reads input shapes and dtypes from the capture's placeholders
    inputs_only = fx.Graph()
    for name, p in zip(names, placeholders):
        inputs_only.placeholder(name).meta = dict(p.meta)
    inputs_only.output(())
    result = tuple(torch.empty(0) for _ in om.outputs)
    captured = CapturedGraph(
        graph_module=fx.GraphModule(torch.nn.Module(), inputs_only),
        inputs=[GraphInput("user", name, i) for i, name in enumerate(names)],
        outputs=[GraphOutput("user") for _ in om.outputs],
        in_spec=pytree.tree_flatten((tuple(flat), {}))[1],
        out_spec=pytree.tree_flatten(result[0] if len(result) == 1 else result)[1],
        constant_args={}, module=_OnnxSignature(), name=getattr(proto.graph, "name", "") or "onnx_model")
    kernels = [AotKernel(info.name, info.kind, 0, dict(cg.compiled[info.name].asm),
                         dict(cg.compiled[info.name].metadata), list(info.nodes), cg.compiled[info.name].source,
                         info.name, cg.compiled[info.name]) for info in cg.kernels]
    return Artifact(str(target), kernels, [], timings, captured, program)


__all__ = ["compile_onnx_aot"]
