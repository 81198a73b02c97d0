"""uniorch's hardware-independent MLIR graph: import from captures, stages, diagnostics."""
from .context import make_context, parse_module
from .diagnostics import Diagnostic
from .stages import STAGES, lower, stage_of

__all__ = ["make_context", "parse_module", "Diagnostic", "import_captured", "STAGES", "lower", "stage_of", "to_mlir"]


def __getattr__(name):
    # The importer needs torch (seconds to import); parsing and lowering MLIR text does not.
    if name == "import_captured":
        from .importer import import_captured

        return import_captured
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def to_mlir(model_or_fn, args=(), kwargs=None, stage: str = "linalg", ctx=None):
    """Captures `model_or_fn(*args, **kwargs)` and returns its MLIR module at `stage`."""
    from ..capture import capture
    from .importer import import_captured

    module = import_captured(capture(model_or_fn, args, kwargs), ctx)
    return lower(module, stage)
