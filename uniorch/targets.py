"""Target strings `vendor[:arch]` (DESIGN.md) and what each one means here."""
from __future__ import annotations

from dataclasses import dataclass

from .errors import UniorchError

# vendor -> (default arch, known archs, warp/wavefront width)
VENDORS = {
    "interpret": ("cpu", ("cpu",), 32),
    "cuda": ("sm_90", ("sm_80", "sm_89", "sm_90"), 32),
    "rocm": ("gfx942", ("gfx90a", "gfx942", "gfx1100"), 64),
    "cann": ("ascend910b", ("ascend910b",), 32),
}
# Backends that can run kernels in this version; the others are named so errors can say so.
RUNNABLE = ("interpret",)


class TargetError(UniorchError):
    pass


@dataclass(frozen=True)
class Target:
    vendor: str
    arch: str

    def __str__(self) -> str:
        return f"{self.vendor}:{self.arch}"

    @property
    def warp_size(self) -> int:
        return VENDORS[self.vendor][2]

    @property
    def interpret(self) -> bool:
        return self.vendor == "interpret"


def known_targets() -> list[str]:
    return ["auto"] + [v for v in VENDORS] + [f"{v}:{a}" for v, (_, archs, _) in VENDORS.items() for a in archs if v != "interpret"]


def parse_target(text: str | Target) -> Target:
    if isinstance(text, Target):
        return text
    text = (text or "auto").strip()
    if text == "auto":
        return Target("interpret", "cpu")  # the GPU backends are not built yet (see README)
    vendor, _, arch = text.partition(":")
    if vendor not in VENDORS:
        raise TargetError(f"unknown target '{text}'; known targets: {', '.join(known_targets())}")
    default, archs, _ = VENDORS[vendor]
    arch = arch or default
    if arch not in archs and vendor != "cuda":
        raise TargetError(f"unknown {vendor} architecture '{arch}'; known: {', '.join(archs)}")
    return Target(vendor, arch)


def require_runnable(target: Target) -> None:
    if target.vendor not in RUNNABLE:
        raise TargetError(f"target '{target}' cannot run kernels in this version: its backend is not built yet; "
                          f"use target='interpret' (runnable targets: {', '.join(RUNNABLE)})")


def triton_target(target: Target):
    """Triton's GPUTarget for compiling to this target (the interpreter borrows NVIDIA sm_90)."""
    from triton.backends.compiler import GPUTarget

    if target.vendor == "rocm":
        return GPUTarget("hip", target.arch, 64)
    if target.vendor == "cuda":
        return GPUTarget("cuda", int(target.arch.removeprefix("sm_")), 32)
    return GPUTarget("cuda", 90, 32)
