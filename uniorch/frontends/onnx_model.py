"""`uniorch.compile(onnx_model)`: an ONNX model as a callable over torch tensors.

Inputs are the graph's inputs in order (or by name as keywords); the result is one tensor, or a
tuple when the graph has several outputs. Each new set of input shapes and dtypes is compiled with
those shapes fixed in the model (so symbolic ONNX dimensions become concrete before import).

What uniorch cannot compile runs on an ONNX reference instead and `explain` says why: onnxruntime
when it is installed, else onnx's own reference evaluator (slow, but exact ONNX semantics).
"""
from __future__ import annotations

import threading
import time
from typing import Any, Optional

import torch

from ..errors import UniorchError
from . import onnx as fo


class OnnxReference:
    """Runs the ONNX model itself: the eager fallback and the reference tests compare against."""

    def __init__(self, proto):
        self.proto = proto
        self.names = [s.name for s in fo.input_specs(proto)]
        try:
            import onnxruntime as ort

            self.kind = "onnxruntime"
            self._session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
            self._run = lambda feeds: self._session.run(None, feeds)
        except Exception:  # not installed, or too old for this model's IR version
            from onnx.reference import ReferenceEvaluator

            self.kind = "onnx.reference"
            self._session = ReferenceEvaluator(proto)
            self._run = lambda feeds: self._session.run(None, feeds)

    def __call__(self, *inputs: torch.Tensor) -> list[torch.Tensor]:
        feeds = {n: _to_numpy(t) for n, t in zip(self.names, inputs)}
        return [_from_numpy(o) for o in self._run(feeds)]


def _to_numpy(t: torch.Tensor):
    t = t.detach().cpu()
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()


def _from_numpy(a) -> torch.Tensor:
    import numpy as np

    return torch.from_numpy(np.array(a))  # np.array keeps 0-d results 0-d (ascontiguousarray does not)


def with_shapes(proto, shapes: list[tuple[int, ...]]):
    """A copy of the model whose graph inputs have these concrete shapes, shapes re-inferred."""
    import onnx

    fixed = onnx.ModelProto()
    fixed.CopyFrom(proto)
    inits = {i.name for i in fixed.graph.initializer}
    inputs = [v for v in fixed.graph.input if v.name not in inits]
    for v, shape in zip(inputs, shapes):
        dims = v.type.tensor_type.shape.dim
        del dims[:]
        for d in shape:
            dims.add().dim_value = int(d)
    for v in fixed.graph.output:  # symbolic dims are re-inferred from the now concrete inputs
        for d in v.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                d.ClearField("dim_param")
    del fixed.graph.value_info[:]
    return fo.load(fixed)


class _OnnxEntry:
    def __init__(self, compiled=None, fallback_reason: str = "", stage: str = "", timings=None):
        self.compiled, self.fallback_reason, self.stage = compiled, fallback_reason, stage
        self.timings = timings or {}


class OnnxModel:
    """What `uniorch.compile` returns for an ONNX model."""

    def __init__(self, model: Any, target, fallback: str = "eager"):
        self.proto = fo.load(model)
        self.inputs = fo.input_specs(self.proto)
        self.outputs = fo.output_specs(self.proto)
        self._target, self._fallback = target, fallback
        self._cache: dict = {}
        self._lock = threading.Lock()
        self._reference: Optional[OnnxReference] = None

    @property
    def target(self):
        return self._target

    def _flat(self, args, kwargs) -> list[torch.Tensor]:
        names = [s.name for s in self.inputs]
        if len(args) > len(names):
            raise UniorchError(f"the ONNX model takes {len(names)} inputs ({', '.join(names)}), got {len(args)}")
        values = list(args) + [None] * (len(names) - len(args))
        for k, v in kwargs.items():
            if k not in names:
                raise UniorchError(f"the ONNX model has no input '{k}'; its inputs: {', '.join(names)}")
            values[names.index(k)] = v
        missing = [n for n, v in zip(names, values) if v is None]
        if missing:
            raise UniorchError(f"missing ONNX input(s): {', '.join(missing)}")
        for spec, v in zip(self.inputs, values):
            if not isinstance(v, torch.Tensor):
                raise UniorchError(f"ONNX input '{spec.name}' must be a torch.Tensor, got {type(v).__name__}")
            if v.dtype != spec.dtype:
                raise UniorchError(f"ONNX input '{spec.name}' has dtype {v.dtype}, the model declares {spec.dtype}")
            static = [(i, d) for i, d in enumerate(spec.shape) if isinstance(d, int) and d > 0]
            if v.dim() != len(spec.shape) or any(v.shape[i] != d for i, d in static):
                raise UniorchError(f"ONNX input '{spec.name}' has shape {tuple(v.shape)}, the model declares "
                                   f"{tuple(spec.shape)}")
        return values

    def reference(self) -> OnnxReference:
        if self._reference is None:
            self._reference = OnnxReference(self.proto)
        return self._reference

    def entry(self, flat: list[torch.Tensor]) -> _OnnxEntry:
        key = tuple((tuple(t.shape), t.dtype, t.device.type) for t in flat)
        with self._lock:
            if key not in self._cache:
                self._cache[key] = self._compile([tuple(t.shape) for t in flat])
            return self._cache[key]

    def _compile(self, shapes) -> _OnnxEntry:
        from ..ir import make_context
        from ..runtime.compiler import RegionError, compile_module

        t = time.perf_counter()
        timings = {}
        try:
            proto = with_shapes(self.proto, shapes)
            module = fo.to_linalg(proto, make_context())
            timings["import+lower"] = time.perf_counter() - t
            specs = [(s, spec.dtype) for s, spec in zip(shapes, self.inputs)]
            compiled = compile_module(module, self._target, input_specs=specs)
            timings.update(compiled.timings)
            return _OnnxEntry(compiled, timings=timings)
        except (fo.OnnxError, RegionError) as err:
            if self._fallback == "error":
                raise
            stage = getattr(err, "stage", "import")
            return _OnnxEntry(None, str(err), stage, timings)

    def __call__(self, *args, **kwargs):
        flat = self._flat(args, kwargs)
        entry = self.entry(flat)
        if entry.compiled is not None:
            outs = list(entry.compiled(*flat))
        else:
            outs = self.reference()(*flat)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def explain(self, *args, **kwargs):
        from ..report import FallbackReport, KernelReport, Report, compute_types as _compute_types

        flat = self._flat(args, kwargs)
        entry = self.entry(flat)
        minimum = sum(t.numel() * t.element_size() for t in flat)
        minimum += sum(i.ByteSize() for i in self.proto.graph.initializer)
        if entry.compiled is None:
            fb = FallbackReport("(whole ONNX model)", f"runs on {self.reference().kind}", entry.stage,
                                entry.fallback_reason)
            return Report(str(self._target), [], [fb], entry.timings, len(self.proto.graph.node), 0, 0, minimum)
        funcs = {name: k.func_op for name, k in entry.compiled.plan.kernels.items()}
        kernels = [KernelReport(k.name, k.kind, [(n, "") for n in k.nodes], k.schedule, k.bytes_read,
                                k.bytes_written, k.source, _compute_types(funcs.get(k.name)))
                   for k in entry.compiled.kernels]
        moved = sum(k.bytes_read + k.bytes_written for k in kernels)
        n = len(self.proto.graph.node)
        return Report(str(self._target), kernels, [], entry.timings, n, n, moved, minimum)
