"""Launching a uniorch kernel through Triton: the JIT path and the ahead-of-time path."""
from __future__ import annotations

import json
import os
import tempfile
import threading
from typing import Any

from .sdk import CompiledKernel, tensor_args


# Triton's interpreter runs a kernel by patching `triton.language` process-wide and restoring it
# afterwards; two threads interleaving that leave it patched for good, and Triton's front end then
# builds IR with the interpreter's builder ("'InterpreterBuilder' object has no attribute
# 'create_reduce'"). Interpreted launches and front-end compiles therefore take turns.
TRITON_LANGUAGE_LOCK = threading.RLock()


class TritonLauncher:
    """Calls a `@triton.jit` (or interpreted) kernel with a uniorch kernel's arguments."""

    def __init__(self, kernel, fn: Any):
        self.kernel, self.fn = kernel, fn

    def __call__(self, inputs: list, outputs: list) -> None:
        ks = self.kernel
        with TRITON_LANGUAGE_LOCK:
            self.fn[ks.grid](*tensor_args(ks, inputs, outputs), **ks.constexprs, num_warps=ks.num_warps,
                             num_stages=ks.num_stages)


class BinaryLauncher:
    """Runs a kernel binary compiled earlier (cubin / hsaco) through Triton's runtime, without
    compiling: the binary and Triton's metadata are handed to `triton.compiler.CompiledKernel`."""

    def __init__(self, compiled: CompiledKernel, binary_stage: str):
        from triton.compiler import ASTSource
        from triton.compiler.compiler import CompiledKernel as TritonKernel

        from uniorch.runtime import loader

        ks = compiled.source
        if binary_stage not in compiled.asm:
            raise ValueError(f"kernel {compiled.name} was compiled without its '{binary_stage}' stage")
        # Triton's CompiledKernel takes its inputs as files and reads them all when constructed,
        # so they live in a folder only that long (one leaked folder per loaded kernel otherwise).
        with tempfile.TemporaryDirectory(prefix="uniorch-kernel-") as folder:
            group = {}
            meta_path = os.path.join(folder, f"{ks.fn_name}.json")
            with open(meta_path, "w") as f:
                json.dump(compiled.metadata, f)
            group[f"{ks.fn_name}.json"] = meta_path
            bin_path = os.path.join(folder, f"{ks.fn_name}.{binary_stage}")
            with open(bin_path, "wb") as f:
                f.write(compiled.asm[binary_stage])
            group[f"{ks.fn_name}.{binary_stage}"] = bin_path
            # the JIT function only supplies argument names for the launcher; nothing is compiled
            fn = loader.load(ks, interpret=False)
            src = ASTSource(fn, signature=ks.signature(), constexprs=ks.constexprs)
            self.kernel = ks
            self.compiled = TritonKernel(src, group, compiled.metadata.get("hash", ks.fn_name))

    def __call__(self, inputs: list, outputs: list) -> None:
        ks = self.kernel
        grid = tuple(ks.grid) + (1,) * (3 - len(ks.grid))
        args = tensor_args(ks, inputs, outputs) + list(ks.constexprs.values())
        self.compiled[grid](*args)
