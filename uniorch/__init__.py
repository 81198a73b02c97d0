"""uniorch: capture a PyTorch model, make it one hardware-independent MLIR graph, compile it for any vendor.

See docs/design.md for the whole data flow. What exists today: capture (`uniorch.capture`), import and
lowering to linalg-on-tensors (`uniorch.ir`), the pass registry (`uniorch.passes`) and `uniorch-opt`.
"""
import importlib
import sys
import types

from .errors import CaptureError, LoweringError, MLIRImportError, PipelineError, UniorchError

__version__ = "0.1.0"
__all__ = [
    "compile",
    "explain",
    "compile_aot",
    "load",
    "Artifact",
    "CompiledModule",
    "Report",
    "capture",
    "CapturedGraph",
    "to_mlir",
    "UniorchError",
    "CaptureError",
    "MLIRImportError",
    "LoweringError",
    "PipelineError",
]

# capture and to_mlir need torch, which takes seconds to import; `uniorch-opt` on MLIR text never
# does. So they are imported on first use (PEP 562) and `uniorch-opt x.mlir` starts in under a second.
_LAZY = {"capture": "uniorch.capture", "CapturedGraph": "uniorch.capture", "to_mlir": "uniorch.ir",
         "compile": "uniorch.api", "explain": "uniorch.api", "CompiledModule": "uniorch.api", "Report": "uniorch.api",
         "compile_aot": "uniorch.aot", "load": "uniorch.aot", "Artifact": "uniorch.aot"}


def __getattr__(name):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    def __setattr__(self, name, value):
        # Importing the subpackage uniorch.capture makes Python set the attribute `uniorch.capture`
        # to that subpackage. The public `uniorch.capture` is the function, as the eager
        # `from .capture import capture` used to leave it, whichever import comes first.
        if name == "capture" and isinstance(value, types.ModuleType) and value.__name__ == "uniorch.capture":
            value = value.capture
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

