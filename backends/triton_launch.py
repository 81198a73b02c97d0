"""Launching a uniorch kernel through Triton's JIT (kernels compiled ahead of time launch through
the vendor driver instead: `binary_launch`)."""
from __future__ import annotations

import threading
from typing import Any

from .sdk import tensor_args


# Triton's interpreter runs a kernel by patching `triton.language` process-wide and restoring it
# afterwards; two threads interleaving that leave it patched for good, and Triton's front end then
# builds IR with the interpreter's builder ("'InterpreterBuilder' object has no attribute
# 'create_reduce'"). Interpreted launches and front-end compiles therefore take turns.
TRITON_LANGUAGE_LOCK = threading.RLock()


class TritonLauncher:
    """Calls a `@triton.jit` (or interpreted) kernel with a uniorch kernel's arguments."""

    def __init__(self, kernel, fn: Any):
        self.kernel, self.fn = kernel, fn

    def __call__(self, inputs: list, outputs: list, sizes: list | None = None) -> None:
        """`sizes`: the values of the kernel's size symbols, when it has any (else read off the tensors)."""
        ks = self.kernel
        with TRITON_LANGUAGE_LOCK:
            grid = ks.launch_grid(ks.size_args(inputs, outputs, sizes)) if ks.symbols else ks.grid
            self.fn[grid](*tensor_args(ks, inputs, outputs, sizes), **ks.constexprs, num_warps=ks.num_warps,
                             num_stages=ks.num_stages)
