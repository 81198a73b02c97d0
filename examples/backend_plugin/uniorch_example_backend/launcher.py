"""Running one kernel: the `Launcher` a backend's `load` returns.

uniorch calls `launcher(inputs, outputs, sizes)` with torch tensors on the backend's `device_type`,
outputs already allocated. The kernel's arguments are, in order (docs/kernels.md §4): for each
input then each output, its pointer and one stride per dimension (element strides, so any
strided view works); then, for a kernel compiled with symbolic sizes, the values of its size
symbols (`sizes`, None for a static kernel); then the constexpr block sizes by keyword.
`tensor_args` builds the list and `launch_grid` the grid (an expression of the sizes in a symbolic
kernel). A GPU backend would hand the same list and grid to its driver's launch call.
"""
from __future__ import annotations

from uniorch.backends.sdk import launch_grid, tensor_args


class InterpreterLauncher:
    def __init__(self, kernel):
        from uniorch.runtime import loader

        self.kernel = kernel
        # The generated source calls `@jit`; the loader binds it to Triton's interpreter.
        self.fn = loader.load(kernel, interpret=True)

    def __call__(self, inputs: list, outputs: list, sizes: list | None = None) -> None:
        ks = self.kernel
        grid = launch_grid(ks, inputs, outputs, sizes)
        self.fn[grid](*tensor_args(ks, inputs, outputs, sizes), **ks.constexprs)
