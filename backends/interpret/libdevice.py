"""`libdevice` for kernels run by Triton's CPU interpreter.

Generated kernels call the vendor math library as `libdevice.<fn>(...)` (see
uniorch/codegen/special.py); on GPUs that name is `triton.language.extra.libdevice`, which Triton
resolves to CUDA libdevice or ROCm ocml at JIT time. The interpreter cannot run extern calls
(`create_extern_elementwise` raises NotImplementedError), so the loader binds `libdevice` in
interpreted modules to this bridge instead: each function takes the interpreter's tensors (numpy
data under `.handle.data`), evaluates the same mathematical function with PyTorch's CPU kernel at
the operands' own precision, and wraps the result back as an interpreter tensor of libdevice's
result type. Only functions codegen emits are here; any other name raises AttributeError, so a
kernel using one fails at its trial launch and runs eagerly with that reason.

What this checks on a machine without a GPU: that the kernel wires the right function to the
right values, dtypes and shapes. It cannot check the vendor library's own accuracy (PyTorch's GPU
kernels call the same library functions).
"""
from __future__ import annotations

import numpy as np
import torch

_TORCH = {
    "acos": torch.acos, "acosh": torch.acosh, "asin": torch.asin, "asinh": torch.asinh,
    "atan": torch.atan, "atanh": torch.atanh, "atan2": torch.atan2,
    "erfc": torch.erfc, "erfinv": torch.erfinv, "erfcx": torch.special.erfcx, "lgamma": torch.lgamma,
    "cyl_bessel_i0": torch.special.i0, "cyl_bessel_i1": torch.special.i1,
    "j0": torch.special.bessel_j0, "j1": torch.special.bessel_j1,
    "y0": torch.special.bessel_y0, "y1": torch.special.bessel_y1,
    "hypot": torch.hypot, "nextafter": torch.nextafter,
}


def _call(fn, name):
    def extern(*args, **_kwargs):
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        tensors = [a for a in args if isinstance(a, tl.tensor)]
        if not tensors:
            raise TypeError(f"libdevice.{name}: no tensor operand")
        # libdevice's result type is the (common) operand type, as its fp32/fp64 overloads take
        ty = max(tensors, key=lambda t: t.dtype.primitive_bitwidth).dtype
        npdt = {32: np.float32, 64: np.float64}.get(ty.primitive_bitwidth) if ty.is_floating() else None
        if npdt is None:
            raise TypeError(f"libdevice.{name}: no {ty} overload")
        data = [np.asarray(a.handle.data if isinstance(a, tl.tensor) else a, dtype=npdt) for a in args]
        data = np.broadcast_arrays(*data)
        out = fn(*(torch.from_numpy(np.ascontiguousarray(d)) for d in data)).numpy().astype(npdt)
        shaped = max(tensors, key=lambda t: len(t.shape))
        out_type = shaped.type.with_element_ty(ty) if shaped.type.is_block() else ty
        return tl.tensor(TensorHandle(out, ty), out_type)

    extern.__name__ = name
    return extern


def __getattr__(name):
    if name in _TORCH:
        return _call(_TORCH[name], name)
    raise AttributeError(f"libdevice.{name} has no interpreter bridge (backends/interpret/libdevice.py)")
