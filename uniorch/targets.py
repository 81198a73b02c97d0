"""Target strings `vendor[:arch]` (docs/design.md): which backend, for which architecture.

The vendors are the registered backends (`uniorch.backends.registry`), so a plugin's target
parses like a built-in one. `auto` is the first backend whose device is present, else `cpu` (native
code through Ascend's adapter and MLIR), else `interpret`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import UniorchError

# `auto` prefers real devices in this order; plugins with a present device come after these, and
# the host CPU (AUTO_LAST) after every accelerator.
AUTO_ORDER = ("cuda", "rocm", "cann")
AUTO_LAST = ("cpu",)


class TargetError(UniorchError):
    pass


@dataclass(frozen=True)
class Target:
    vendor: str
    arch: str

    def __str__(self) -> str:
        return f"{self.vendor}:{self.arch}"

    @property
    def backend(self):
        from uniorch.backends.registry import get

        return get(self.vendor)(self.arch)

    @property
    def warp_size(self) -> int:
        b = self.backend
        return b.wavefront() if hasattr(b, "wavefront") else b.warp_size

    @property
    def interpret(self) -> bool:
        return self.vendor == "interpret"

    @property
    def has_tf32(self) -> bool:
        """Whether float32 dots can run on TF32 tensor cores: NVIDIA GPUs from sm_80."""
        digits = "".join(c for c in self.arch if c.isdigit())
        return self.vendor == "cuda" and bool(digits) and int(digits) >= 80


def _backends() -> dict:
    from uniorch.backends.registry import backends

    return backends()


def known_targets() -> list[str]:
    table = _backends()
    return ["auto"] + list(table) + [f"{v}:{a}" for v, cls in table.items() for a in cls.archs if v != "interpret"]


def auto_target() -> Target:
    table = _backends()
    order = [v for v in AUTO_ORDER if v in table] + \
        [v for v in table if v not in AUTO_ORDER + AUTO_LAST and v != "interpret"] + [v for v in AUTO_LAST if v in table]
    for vendor in order:
        cls = table[vendor]
        if not getattr(cls, "auto_select", True):
            continue
        try:
            if cls.is_available():
                return Target(vendor, cls.default_arch())
        except Exception:  # noqa: BLE001 - a plugin's probe must not break target selection
            continue
    return Target("interpret", "cpu")


def parse_target(text: str | Target) -> Target:
    if isinstance(text, Target):
        return text
    text = (text or "auto").strip()
    if text == "auto":
        return auto_target()
    vendor, _, arch = text.partition(":")
    table = _backends()
    if vendor not in table:
        raise TargetError(f"unknown target '{text}'; known targets: {', '.join(known_targets())}")
    cls = table[vendor]
    arch = arch or cls.default_arch()
    if arch not in cls.archs and not (cls.arch_pattern and re.fullmatch(cls.arch_pattern, arch)):
        more = f" (any matching {cls.arch_pattern})" if cls.arch_pattern else ""
        raise TargetError(f"unknown {vendor} architecture '{arch}'; known: {', '.join(cls.archs)}{more}")
    return Target(vendor, arch)


def require_runnable(target: Target) -> None:
    from uniorch.backends.sdk import availability

    ok, why = availability(_backends()[target.vendor])
    if not ok:
        raise TargetError(f"target '{target}' cannot run kernels here: {why}; "
                          f"use uniorch.compile_aot to build for it without a device, or target='interpret'")


def triton_target(target: Target):
    """Triton's GPUTarget whose front end compiles kernels for this target."""
    return target.backend.triton_target()
