"""ONNX models into uniorch's MLIR graph, through torch-mlir's ONNX importer.

    ModelProto / .onnx path → (shape inference) → torch dialect with `torch.operator "onnx.*"` ops
    → torch-mlir's onnx-to-torch conversion and backend contract → linalg-on-tensors

From linalg on, an ONNX model is compiled exactly like a captured PyTorch model. A model
torch-mlir cannot convert is a clear error naming the ONNX node (its location is the node name).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Union

import torch

from ..errors import UniorchError

# torch-mlir's ONNX pipeline, from `onnx.*` ops to the torch backend contract
ONNX_TO_TORCH = "builtin.module(torch-onnx-to-torch-backend-pipeline)"


class OnnxError(UniorchError):
    """The input is not a usable ONNX model, or torch-mlir cannot convert one of its nodes."""

    def __init__(self, message: str, diagnostics=()):
        super().__init__(message)
        self.diagnostics = list(diagnostics)


_ONNX_DTYPES = {1: torch.float32, 2: torch.uint8, 3: torch.int8, 5: torch.int16, 6: torch.int32, 7: torch.int64,
                9: torch.bool, 10: torch.float16, 11: torch.float64, 16: torch.bfloat16}


@dataclass(frozen=True)
class OnnxTensorSpec:
    name: str
    shape: tuple  # ints, or strings for symbolic dimensions
    dtype: torch.dtype


def is_onnx(obj: Any) -> bool:
    if isinstance(obj, (str, os.PathLike)):
        return str(obj).endswith(".onnx")
    return type(obj).__name__ == "ModelProto" and type(obj).__module__.startswith("onnx")


def load(model: Union[str, os.PathLike, Any]):
    """A checked, shape-inferred `onnx.ModelProto` from a path or a ModelProto."""
    import onnx

    name = str(model) if isinstance(model, (str, os.PathLike)) else "<ModelProto>"
    if isinstance(model, (str, os.PathLike)):
        if not os.path.exists(model):
            raise OnnxError(f"{name}: no such file")
        try:
            proto = onnx.load(str(model))
        except Exception as err:  # protobuf's DecodeError and friends
            raise OnnxError(f"{name}: not a readable ONNX model ({type(err).__name__}: {err})") from None
    else:
        proto = model
    try:
        onnx.checker.check_model(proto)
    except Exception as err:  # onnx.checker.ValidationError
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise OnnxError(f"{name}: invalid ONNX model: {first}") from None
    if not proto.graph.node and not proto.graph.output:
        raise OnnxError(f"{name}: the ONNX graph is empty")
    proto = _optional_outputs_named(proto)
    try:
        return onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception as err:
        raise OnnxError(f"{name}: ONNX shape inference failed: {err}") from None


# ops whose torch-mlir conversion reads every output the op can have: with optional ones left out
# (Unique asked for Y only), the conversion segfaults the process
_EVERY_OUTPUT = {"Unique": 4}


def _optional_outputs_named(proto):
    """The model with such ops' missing optional outputs named (unused values), on a copy."""
    short = [n for n in proto.graph.node if n.domain in ("", "ai.onnx") and n.op_type in _EVERY_OUTPUT
             and (len(n.output) < _EVERY_OUTPUT[n.op_type] or "" in n.output)]
    if not short:
        return proto
    import onnx

    proto = onnx.ModelProto.FromString(proto.SerializeToString())
    taken = {v for n in proto.graph.node for v in n.output} | {v.name for v in proto.graph.input}
    for node in proto.graph.node:
        want = _EVERY_OUTPUT.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if want is None:
            continue
        names = list(node.output) + [""] * (want - len(node.output))
        for i, v in enumerate(names):
            if not v:
                v = f"{node.name or node.op_type}_unused_{i}"
                while v in taken:
                    v += "_"
                taken.add(v)
                names[i] = v
        del node.output[:]
        node.output.extend(names)
    return proto


def input_specs(proto) -> list[OnnxTensorSpec]:
    inits = {i.name for i in proto.graph.initializer}
    return [_spec(v) for v in proto.graph.input if v.name not in inits]


def output_specs(proto) -> list[OnnxTensorSpec]:
    return [_spec(v) for v in proto.graph.output]


def _spec(value_info) -> OnnxTensorSpec:
    t = value_info.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim)
    if t.elem_type not in _ONNX_DTYPES:
        raise OnnxError(f"ONNX input/output '{value_info.name}' has element type {t.elem_type}, which uniorch "
                        f"does not support")
    return OnnxTensorSpec(value_info.name, dims, _ONNX_DTYPES[t.elem_type])


def import_onnx(proto, ctx):
    """The model as a torch-dialect module (ONNX ops as `torch.operator`), before conversion."""
    from torch_mlir.extras import onnx_importer

    try:
        info = onnx_importer.ModelInfo(proto, config=onnx_importer.Config())
        module = info.create_module(context=ctx)
        imp = onnx_importer.NodeImporter.define_function(info.main_graph, module.operation)
        imp.import_all()
        from torch_mlir import ir

        with ctx:  # uniorch's passes look for @main, as in a capture's module
            for op in module.body.operations:
                if op.operation.name == "func.func":
                    op.operation.attributes["sym_name"] = ir.StringAttr.get("main")
                    break
    except Exception as err:  # the importer raises OnnxImportError and plain errors alike
        raise OnnxError(f"torch-mlir's ONNX importer failed: {type(err).__name__}: {err}") from None
    return module


def to_linalg(proto, ctx):
    """Imports and lowers an ONNX model to uniorch's linalg-on-tensors graph."""
    from ..ir.stages import PIPELINES, run_pipeline_text
    from ..errors import LoweringError

    module = import_onnx(proto, ctx)
    try:
        run_pipeline_text(module, ONNX_TO_TORCH, "converting ONNX to the torch dialect")
        run_pipeline_text(module, PIPELINES["linalg"], "lowering torch to linalg")
    except LoweringError as err:
        raise OnnxError(_named(str(err), err.diagnostics, proto), err.diagnostics) from None
    return module


def _named(what: str, diagnostics, proto) -> str:
    """A lowering failure with the ONNX node it is at (the importer locates each op at its node's
    name) and MLIR's first message, which a traceback shows; the diagnostics hold the rest."""
    import re

    nodes = {n.name: n for n in proto.graph.node if n.name}
    first = next(iter(diagnostics), None)
    if first is None:
        return what
    found = [m for d in [first, *first.notes] for m in re.findall(r'loc\("([^"]+)"', str(d.raw_location or ""))]
    node = next((nodes[m] for m in found if m in nodes), None)
    said = str(first.message).splitlines()[0]
    said = re.sub(r"^failed to legalize operation '([^']+)'.*$", r"no lowering for '\1'", said)
    m = re.search(r'name = "([^"]+)"', str(first.message))
    if m:
        said += f" ({m.group(1)})"
    if node is not None:
        kind = f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type
        return f"{what} at ONNX node '{node.name}' ({kind}): {said}"
    return f"{what}: {said}"


__all__ = ["OnnxError", "OnnxTensorSpec", "is_onnx", "load", "input_specs", "output_specs", "import_onnx", "to_linalg"]
