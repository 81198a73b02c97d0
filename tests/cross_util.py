"""Test helpers for cross-compiling without a GPU: ptxas on PTX, ELF checks on binaries, and a
model → scheduled module → every kernel through a backend's stages.

ptxas checks the PTX independently of the cubin stage (which runs Triton's own ptxas): the one on
PATH first, as a user's CUDA toolkit would, else the copy Triton ships.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190  # e_machine of NVIDIA cubins
EM_AMDGPU = 224  # e_machine of AMD code objects (HSACO)


from uniorch.backends.cuda.ptxas import ptx_isa, ptx_target, ptxas_for, ptxas_tools, run_ptxas  # noqa: F401


def elf_machine(blob: bytes) -> int:
    """e_machine of an ELF file (the same offset in ELF32 and ELF64); -1 when not an ELF."""
    if len(blob) < 20 or blob[:4] != ELF_MAGIC:
        return -1
    endian = "<" if blob[5] == 1 else ">"
    return struct.unpack_from(endian + "H", blob, 18)[0]


@dataclass
class CrossReport:
    """What cross-compiling one model for one target did."""

    model: str
    target: str
    kernels: int = 0  # kernels compiled through the binary stage
    unsupported: list = field(default_factory=list)  # kernels that run eagerly (uniorch.unsupported)
    ptxas_ok: int = 0
    failures: list = field(default_factory=list)  # (kernel, why)
    seconds: float = 0.0


def scheduled_module(model, args, kwargs, target):
    """The model captured, lowered and scheduled for `target` (what the runtime compiles)."""
    from uniorch.ir import to_mlir
    from uniorch.runtime.compiler import to_kernel_stage

    module = to_mlir(model, args, kwargs)
    return to_kernel_stage(module, "scheduled", target)


def cross_compile(name: str, linalg_text: str, target_text: str, check_ptx: bool = True) -> CrossReport:
    """Every kernel of a linalg module, scheduled for `target_text`, through the target's stages to
    its binary; ptxas on each PTX. Failures are collected per kernel, not raised."""
    from torch_mlir import ir

    from uniorch.backends import BackendError
    from uniorch.backends.binary_launch import VENDORS, DriverLauncher
    from uniorch.backends.driver import compile_kernel
    from uniorch.codegen import generate
    from uniorch.ir import make_context
    from uniorch.ir.context import parse_module
    from uniorch.runtime.compiler import kernel_functions, to_kernel_stage
    from uniorch.targets import parse_target

    start = time.perf_counter()
    target = parse_target(target_text)
    module = to_kernel_stage(parse_module(linalg_text, make_context()), "scheduled", target)
    backend = target.backend
    rep = CrossReport(name, str(target))
    for op in kernel_functions(module):
        kname = ir.StringAttr(op.attributes["sym_name"]).value
        if "uniorch.unsupported" in op.attributes:
            rep.unsupported.append(kname)
            continue
        try:
            ck = compile_kernel(generate(op, str(target)), backend, linalg=op.get_asm(enable_debug_info=True))
        except Exception as err:  # noqa: BLE001 - collect every failure of the model, then report
            rep.failures.append((kname, f"{type(err).__name__}: {err}"))
            continue
        rep.kernels += 1
        if backend.binary_stage is None:  # a hand-off (cann): the files its toolchain takes in
            files = backend.handoff_files(ck)
            if not any(f.endswith(".linalg.mlir") for f in files) or not any(f.endswith(".ttir.mlir") for f in files):
                rep.failures.append((kname, f"hand-off lacks its TTIR or linalg file: {sorted(files)}"))
            adapted = [text for f, text in files.items() if f.endswith(".ttadapter.mlir")]
            if not adapted or "func.func @" not in adapted[0] or "mix_mode" not in adapted[0]:
                rep.failures.append((kname, "hand-off lacks Ascend's adapter output (.ttadapter.mlir)"))
            continue
        binary = ck.asm.get(backend.binary_stage)
        if not isinstance(binary, bytes) or elf_machine(binary) not in (EM_CUDA, EM_AMDGPU):
            rep.failures.append((kname, f"{backend.binary_stage} is not an ELF for the GPU"))
        if backend.name in VENDORS:  # what the driver launcher reads from the binary: its ABI and arch
            try:
                DriverLauncher(ck, backend.name).check_device(backend.arch)
            except BackendError as err:
                rep.failures.append((kname, f"driver launcher: {err}"))
        if check_ptx and "ptx" in ck.asm:
            proc = run_ptxas(ck.asm["ptx"], backend.arch)
            if proc.returncode == 0:
                rep.ptxas_ok += 1
            else:
                rep.failures.append((kname, f"ptxas -arch={backend.arch}: {proc.stderr.strip()[:2000]}"))
    rep.seconds = time.perf_counter() - start
    return rep
