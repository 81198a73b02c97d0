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


@functools.lru_cache(maxsize=None)
def ptxas_tools() -> list[tuple[str, int]]:
    """(path, highest PTX ISA version it reads, e.g. 90 for 9.0) of every ptxas found: the one
    on PATH first, then the two Triton ships (CUDA 12.x for sm < 90, a newer one for sm >= 90)."""
    try:
        from triton import knobs
        from triton.backends.nvidia.compiler import ptx_get_version
        from triton.knobs import NvidiaTool
    except Exception:  # noqa: BLE001 - no usable Triton NVIDIA backend
        return []
    paths = [shutil.which("ptxas")]
    for tool in (knobs.nvidia.ptxas, knobs.nvidia.ptxas_blackwell):
        try:
            paths.append(tool.path)
        except RuntimeError:
            pass
    found, seen = [], set()
    for path in paths:
        tool = NvidiaTool.from_path(path) if path else None
        if tool is None or os.path.realpath(path) in seen:
            continue
        seen.add(os.path.realpath(path))
        found.append((path, ptx_get_version(tool.version)))
    return found


def ptx_isa(ptx: str) -> int:
    """The `.version X.Y` the PTX declares, as Triton writes it (X*10+Y)."""
    m = re.search(r"^\.version (\d+)\.(\d+)", ptx, re.MULTILINE)
    return int(m.group(1)) * 10 + int(m.group(2)) if m else 0


def ptxas_for(ptx: str) -> str | None:
    """The first ptxas (PATH preferred) that reads the PTX's ISA version.

    Triton stamps PTX with the version of the ptxas it ships for the arch (9.4 for sm_90 with
    Triton 3.9), which an older toolkit's ptxas refuses before looking at a single instruction."""
    need = ptx_isa(ptx)
    return next((path for path, isa in ptxas_tools() if isa >= need), None)


def ptx_target(ptx: str) -> str:
    """The PTX's `.target`: Triton writes sm_90a (not sm_90) for Hopper, whose wgmma needs it."""
    m = re.search(r"^\.target (sm_\w+)", ptx, re.MULTILINE)
    return m.group(1) if m else ""


def run_ptxas(ptx: str, arch: str) -> subprocess.CompletedProcess:
    """`ptxas -arch=<arch>` on the PTX text; returncode 0 when ptxas accepts it. `arch` is the
    target's (sm_90); ptxas gets the PTX's own `.target` when that is its arch-specific form."""
    if ptx_target(ptx) == arch + "a":
        arch += "a"
    ptxas = ptxas_for(ptx)
    if ptxas is None:
        return subprocess.CompletedProcess([], 1, "", f"no ptxas reads PTX ISA {ptx_isa(ptx)}: {ptxas_tools()}")
    with tempfile.TemporaryDirectory(prefix="uniorch-ptxas-") as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        return subprocess.run([ptxas, f"-arch={arch}", src, "-o", out], capture_output=True, text=True, timeout=120)


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
            ck = compile_kernel(generate(op, str(target)), backend)
        except Exception as err:  # noqa: BLE001 - collect every failure of the model, then report
            rep.failures.append((kname, f"{type(err).__name__}: {err}"))
            continue
        rep.kernels += 1
        binary = ck.asm.get(backend.binary_stage)
        if not isinstance(binary, bytes) or elf_machine(binary) not in (EM_CUDA, EM_AMDGPU):
            rep.failures.append((kname, f"{backend.binary_stage} is not an ELF for the GPU"))
        if check_ptx and "ptx" in ck.asm:
            proc = run_ptxas(ck.asm["ptx"], backend.arch)
            if proc.returncode == 0:
                rep.ptxas_ok += 1
            else:
                rep.failures.append((kname, f"ptxas -arch={backend.arch}: {proc.stderr.strip()[:2000]}"))
    rep.seconds = time.perf_counter() - start
    return rep
