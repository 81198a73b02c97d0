"""Exceptions uniorch raises at its public edges.

Each carries enough context (stage, op, source location) for the CLI to print an MLIR-style
diagnostic and for `explain` to report a fallback reason; none of them is a bare internal error.
"""
from __future__ import annotations


class UniorchError(Exception):
    """Base for every error uniorch raises on purpose."""


class CaptureError(UniorchError):
    """The model could not be captured (tracing raised, or produced something we cannot import)."""


class AttributeWriteError(CaptureError):
    """The traced forward set Python attributes of the model (a call counter, a lazy
    initialisation's flag): a graph cannot, so the call runs eagerly. `reads` are the attribute
    values the trace read, which guard that decision like a compile's; `changed` the writes, as
    'where.name: before -> after' ('unset' before a lazy initialisation)."""

    def __init__(self, message: str, reads: dict, changed: tuple = (), mutates: bool = True):
        super().__init__(message)
        self.reads = reads
        self.changed = tuple(changed)
        self.mutates = mutates  # the traced graph also writes tensors in place

    @property
    def lazy_init(self) -> bool:
        """Every write set an attribute the model did not have, and nothing else changed: a lazy
        initialisation the trace itself did once (export restores attributes that existed, not
        new ones), which a second trace skips."""
        return bool(self.changed) and not self.mutates and all(": unset -> " in c for c in self.changed)


class StateWriteError(CaptureError):
    """The traced forward kept tensors on the model's modules (`self.state = new_state`: a
    recurrent layer's carried state, a cache it keeps itself). Export drops such writes, so its
    graph would answer from stale state; the call runs through Dynamo, which replays them."""


class MLIRImportError(UniorchError):
    """The captured FX graph could not become MLIR (torch-mlir's importer or lowering failed)."""


class LoweringError(UniorchError):
    """A pass pipeline failed; `diagnostics` holds MLIR's diagnostics when there are any."""

    def __init__(self, message: str, diagnostics=()):
        super().__init__(message)
        self.diagnostics = list(diagnostics)


class DataDependentSize(UniorchError, ValueError):
    """An op's loop bounds depend on tensor values (bincount's length, nonzero's count) where no
    kernel can bound them: the ops run in PyTorch, which `explain` says in these words."""


class PipelineError(UniorchError):
    """A pass pipeline's text is malformed, or names an unknown pass or option."""
