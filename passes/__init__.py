"""uniorch's passes, their registry, and pipelines that mix them with upstream MLIR passes."""
from .base import Pass, PassContext
from .pipeline import Element, Instrumentation, Timing, parse_pipeline, run_pipeline
from .registry import get, names

__all__ = ["Pass", "PassContext", "Element", "Instrumentation", "Timing", "parse_pipeline", "run_pipeline", "get", "names"]
