"""Which device a kernel binary runs on, read from the binary itself, and whether the present one
is such a device: checked before the driver loads it, so a mismatch is an error naming both archs
rather than the driver's "no kernel image is available".
"""
from __future__ import annotations

import re
import struct

from .sdk import BackendError

_ELF = b"\x7fELF"
EM_CUDA = 190
EM_AMDGPU = 224


def _elf_header(blob: bytes, machine: int, what: str) -> tuple[int, int]:
    """(EI_ABIVERSION, e_flags) of an ELF for `machine`."""
    if len(blob) < 52 or blob[:4] != _ELF:
        raise BackendError(f"the {what} is not an ELF file")
    endian = "<" if blob[5] == 1 else ">"
    (e_machine,) = struct.unpack_from(endian + "H", blob, 18)
    if e_machine != machine:
        raise BackendError(f"the {what} is an ELF for machine {e_machine}, not {machine}")
    flags_at = 48 if blob[4] == 2 else 36  # ELF64 / ELF32
    (flags,) = struct.unpack_from(endian + "I", blob, flags_at)
    return blob[8], flags


def cubin_sm(cubin: bytes) -> int:
    """The SM number a cubin holds machine code for (90 for sm_90 and sm_90a).

    CUDA's ELF ABI version 7 keeps it in the low byte of e_flags; version 8 (ptxas 13) moved it to
    bits 8-15."""
    abi, flags = _elf_header(cubin, EM_CUDA, "cubin")
    return (flags >> 8) & 0xFF if abi >= 8 else flags & 0xFF


def cuda_arch(cubin: bytes, ptx: str) -> str:
    """"sm_90a" / "sm_80": the SM from the cubin's header; the arch-specific "a" (which only the
    exact SM runs) from the `.target` of the PTX it was assembled from."""
    sm = cubin_sm(cubin)
    m = re.search(r"^\s*\.target\s+sm_(\d+)(a?)", ptx or "", re.MULTILINE)
    if m is not None and int(m.group(1)) != sm:
        raise BackendError(f"the cubin holds code for sm_{sm} but the PTX beside it targets sm_{m.group(1)}{m.group(2)}; "
                           f"the bundle's files do not belong together")
    return f"sm_{sm}" + (m.group(2) if m is not None else "")


def cuda_runs_on(binary_arch: str, device_arch: str) -> bool:
    """NVIDIA's binary compatibility: an sm_XY cubin runs on sm_XZ with Z >= Y (same major); an
    arch-specific sm_XYa cubin on sm_XY only."""
    b = re.fullmatch(r"sm_(\d+)(a?)", binary_arch)
    d = re.fullmatch(r"sm_(\d+)a?", device_arch)
    if b is None or d is None:
        return False
    have, run = int(b.group(1)), int(d.group(1))
    if b.group(2):
        return have == run
    return have // 10 == run // 10 and run % 10 >= have % 10


def hsaco_arch(hsaco: bytes) -> str:
    """"gfx942": the target named in the code object's own metadata note (`amdhsa.target`, e.g.
    "amdgcn-amd-amdhsa--gfx942" or "amdgpu9.42-amd-amdhsa-unknown-gfx942")."""
    _elf_header(hsaco, EM_AMDGPU, "hsaco")
    m = re.search(rb"-amd-amdhsa-[A-Za-z0-9_]*-(gfx[0-9a-f]+)", hsaco)
    if m is None:
        raise BackendError("the hsaco names no amdhsa target in its metadata")
    return m.group(1).decode()


def binary_arch(vendor: str, binary: bytes, asm: dict) -> str:
    if vendor == "cuda":
        return cuda_arch(binary, asm.get("ptx", ""))
    return hsaco_arch(binary)


def check_runs_on(vendor: str, kernel: str, arch: str, device_arch: str) -> None:
    """Raises unless a binary for `arch` runs on a device of `device_arch`."""
    device = device_arch.split(":")[0]  # AMD names carry target features: gfx942:sramecc+:xnack-
    ok = cuda_runs_on(arch, device) if vendor == "cuda" else arch == device
    if not ok:
        raise BackendError(f"kernel {kernel}: its binary is for {arch}, which cannot run on the device present "
                           f"({device}); compile the bundle for {device}")


__all__ = ["binary_arch", "check_runs_on", "cubin_sm", "cuda_arch", "cuda_runs_on", "hsaco_arch"]
