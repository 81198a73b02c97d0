"""What a uniorch pass is: a small frozen dataclass whose fields are its pipeline options.

`uniorch-op-stats{group-by=module}` builds `OpStats(group_by="module")`; the dash-case option names
are the field names. A pass transforms (or inspects) the whole `builtin.module` in place.
"""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from typing import ClassVar, TextIO

from torch_mlir import ir

from uniorch.errors import PipelineError


@dataclass
class PassContext:
    """What a pass may use besides the module: where to report, and the compile target if known."""

    out: TextIO = field(default_factory=lambda: sys.stderr)
    target: str | None = None
    # put before each kernel's name (`bw_k3_attention`): the kernels of a training step's backward,
    # of an optimizer's update and of each region of a program would otherwise all be named k0, k1,
    # ..., and a profiler (which sees only the launched function's name) could not tell them apart
    kernel_prefix: str = ""
    # Triton input_precision for float32 dots, by kernel kind ("*" for any other), as PyTorch's
    # settings at compile time ask (runtime/compiler.py `fp32_precisions`); stamped on each kernel
    # before its schedule is chosen, since the tiles depend on the units the dots run on
    fp32_dots: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Pass:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def run(self, module: ir.Module, pctx: PassContext) -> None:
        raise NotImplementedError

    # -- options ---------------------------------------------------------------------------------
    @classmethod
    def options(cls) -> dict[str, dataclasses.Field]:
        return {f.name.replace("_", "-"): f for f in dataclasses.fields(cls)}

    @classmethod
    def from_options(cls, text: str) -> "Pass":
        """Builds the pass from `key=value key2=value2` (MLIR's pass-option syntax)."""
        known = cls.options()
        kwargs = {}
        for item in _split_options(text):
            key, sep, value = item.partition("=")
            key = key.strip()
            if key not in known:
                listed = ", ".join(known) or "none"
                raise PipelineError(f"pass '{cls.name}' has no option '{key}'; its options: {listed}")
            fld = known[key]
            kwargs[fld.name] = _convert(cls.name, key, value.strip() if sep else "true", fld)
        return cls(**kwargs)

    def pipeline_text(self) -> str:
        opts = []
        for key, fld in self.options().items():
            value = getattr(self, fld.name)
            if value != fld.default:
                opts.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
        return self.name + ("{" + " ".join(opts) + "}" if opts else "")


def _split_options(text: str) -> list[str]:
    return [t for t in text.replace(",", " ").split() if t]


def _convert(pass_name: str, key: str, value: str, fld: dataclasses.Field):
    kind = fld.type if isinstance(fld.type, str) else getattr(fld.type, "__name__", str(fld.type))
    try:
        if kind == "bool":
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(value)
            return value.lower() in ("true", "1")
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
        return value
    except ValueError:
        raise PipelineError(f"pass '{pass_name}' option '{key}' expects {kind}, got '{value}'") from None
