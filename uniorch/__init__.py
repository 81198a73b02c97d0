"""uniorch: capture a PyTorch model, make it one hardware-independent MLIR graph, compile it for any vendor.

See DESIGN.md for the whole data flow. What exists today: capture (`uniorch.capture`), import and
lowering to linalg-on-tensors (`uniorch.ir`), the pass registry (`uniorch.passes`) and `uniorch-opt`.
"""
from .capture import CapturedGraph, capture
from .errors import CaptureError, LoweringError, MLIRImportError, PipelineError, UniorchError
from .ir import to_mlir

__version__ = "0.1.0"
__all__ = [
    "capture",
    "CapturedGraph",
    "to_mlir",
    "UniorchError",
    "CaptureError",
    "MLIRImportError",
    "LoweringError",
    "PipelineError",
]
