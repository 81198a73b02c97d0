"""uniorch's hardware-independent MLIR graph: import from captures, stages, diagnostics."""
from .context import make_context, parse_module
from .diagnostics import Diagnostic
from .importer import import_captured
from .stages import STAGES, lower, stage_of

__all__ = ["make_context", "parse_module", "Diagnostic", "import_captured", "STAGES", "lower", "stage_of", "to_mlir"]


def to_mlir(model_or_fn, args=(), kwargs=None, stage: str = "linalg", ctx=None):
    """Captures `model_or_fn(*args, **kwargs)` and returns its MLIR module at `stage`."""
    from ..capture import capture

    module = import_captured(capture(model_or_fn, args, kwargs), ctx)
    return lower(module, stage)
