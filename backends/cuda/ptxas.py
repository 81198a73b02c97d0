"""Checking PTX with NVIDIA's ptxas, independently of the backend's own cubin stage.

The ptxas on PATH first (a user's CUDA toolkit), else the copies Triton ships: Triton stamps PTX
with the ISA version of the ptxas it bundles for the arch (for sm_90: 9.4 with Triton 3.9, 8.7 with
Triton 3.6), which an older toolkit's ptxas refuses before reading a single instruction. Every
copy is tried, because which bundled ptxas Triton picks for an arch changes between releases.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile


@functools.lru_cache(maxsize=None)
def ptxas_tools() -> list[tuple[str, int]]:
    """(path, highest PTX ISA version it reads, e.g. 90 for 9.0) of every ptxas found: the one
    on PATH first, then the two Triton ships (a CUDA 12.x one and a newer one; Triton 3.9 takes the
    newer from sm_90 on, Triton 3.6 only from sm_100)."""
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


def run_ptxas(ptx: str, arch: str, *flags: str) -> subprocess.CompletedProcess:
    """`ptxas -arch=<arch>` on the PTX text; returncode 0 when ptxas accepts it. `arch` is the
    target's (sm_90); ptxas gets the PTX's own `.target` when that is its arch-specific form.
    `flags` go first (`-v`: registers and spills per function, on stdout or stderr)."""
    if ptx_target(ptx) == arch + "a":
        arch += "a"
    ptxas = ptxas_for(ptx)
    if ptxas is None:
        return subprocess.CompletedProcess([], 1, "", f"no ptxas reads PTX ISA {ptx_isa(ptx)}: {ptxas_tools()}")
    with tempfile.TemporaryDirectory(prefix="uniorch-ptxas-") as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        return subprocess.run([ptxas, *flags, f"-arch={arch}", src, "-o", out], capture_output=True, text=True,
                              timeout=120)
