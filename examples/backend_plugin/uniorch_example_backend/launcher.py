"""Running one kernel: the `Launcher` a backend's `load` returns.

uniorch calls `launcher(inputs, outputs)` with torch tensors on the backend's `device_type`,
outputs already allocated. The kernel's arguments are, in order (docs/kernels.md §4): for each
input then each output, its pointer and one stride per dimension (element strides, so any
strided view works); then the constexpr block sizes by keyword. `tensor_args` builds the list.
A GPU backend would hand the same list to its driver's launch call with `kernel.grid`.
"""
from __future__ import annotations

from uniorch.backends.sdk import tensor_args


class InterpreterLauncher:
    def __init__(self, kernel):
        from uniorch.runtime import loader

        self.kernel = kernel
        # The generated source calls `@jit`; the loader binds it to Triton's interpreter.
        self.fn = loader.load(kernel, interpret=True)

    def __call__(self, inputs: list, outputs: list) -> None:
        ks = self.kernel
        self.fn[ks.grid](*tensor_args(ks, inputs, outputs), **ks.constexprs)
