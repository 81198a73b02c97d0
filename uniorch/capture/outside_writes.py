"""Refuses, while a model is traced, a write into a tensor that is not an input, parameter or buffer.

Export runs the model's Python with fake inputs and fake state, but a tensor the code reaches some
other way (a global, a closure, an optimizer's parameter list) is the real one, and an in-place op
on it runs for real during the trace. Export then rejects the capture ("Constant ... is mutated"),
the eager fallback runs the model, and the write has happened twice. The mode below stops such a
write before it happens, so the capture fails with nothing changed and the fallback runs the model
once (`explain` names the tensor's write).
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from ..errors import CaptureError

# in-place methods that do not write the tensor's values
_NOT_WRITES = {"requires_grad_", "retain_grad", "share_memory_", "record_stream", "is_set_to"}
_WRITE_DUNDERS = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
                  "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
                  "__imatmul__"}


def _outside(t) -> bool:
    """A real tensor: not a fake one of the trace (inputs, parameters, buffers and every value the
    traced code computes are fake)."""
    from torch._subclasses.fake_tensor import is_fake

    return isinstance(t, torch.Tensor) and not is_fake(t) and t.device.type != "meta"


def _written(func, args, kwargs) -> list:
    """The tensors `func(*args, **kwargs)` writes into."""
    out = kwargs.get("out") if kwargs else None
    written = list(out) if isinstance(out, (tuple, list)) else [out] if out is not None else []
    if isinstance(func, torch._ops.OpOverload):
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is not None and a.alias_info.is_write:
                written.append(args[i] if i < len(args) else kwargs.get(a.name))
        return written
    name = getattr(func, "__name__", "")
    if args and (name in _WRITE_DUNDERS or (name.endswith("_") and not name.startswith("_")
                                            and name not in _NOT_WRITES)):
        written.append(args[0])
    return written


class NoOutsideWrites(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in _written(func, args, kwargs):
            if _outside(t):
                raise CaptureError(
                    f"{getattr(func, '__name__', func)} writes into a {tuple(t.shape)} tensor that is not an "
                    f"argument, parameter or buffer of the model (a global, a closure or an object's "
                    f"attribute); pass it as an argument or register it as a buffer to compile the write")
        return func(*args, **kwargs)
