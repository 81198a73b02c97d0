"""Runtime checks a decomposition can leave in the graph: a boolean tensor the compiled model
verifies after its kernels ran.

Why: some rewrites are exact only when a condition holds that is known at run time alone (an
iterative method converged within its fixed number of steps). `require(ok, what)` records that
condition; if any element of `ok` is false when the model runs, uniorch discards the compiled
result and runs the call eagerly, so a failed condition costs time, never a wrong answer.
ATen's own `_linalg_check_errors` (singular matrices, non-positive-definite inputs) becomes the
same kind of check, raising eager's error.

Both are effectful ops to `torch.export` (they return nothing), so capture sees them as
`with_effects` nodes threaded by tokens; `capture.trace` turns each into an extra graph output of
kind "check" that `CapturedGraph.finish` evaluates.
"""
from __future__ import annotations

import torch
from torch._higher_order_ops.effects import _EffectType, _get_effect, _register_effectful_op

from ..runtime.boundary import CheckFailed  # noqa: F401 - raised at the boundary, named here for users

_lib = torch.library.Library("uniorch", "FRAGMENT")
_lib.define("require(Tensor ok, str what) -> ()")


def _require_eager(ok: torch.Tensor, what: str) -> None:
    """Eager PyTorch runs the original op, not the rewrite the condition belongs to: nothing to do."""


_lib.impl("require", _require_eager, "CompositeExplicitAutograd")
torch.library.register_fake("uniorch::require", lambda ok, what: None, lib=_lib)
_register_effectful_op(torch.ops.uniorch.require.default, _EffectType.ORDERED)
# torch 2.13 marks ATen's check effectful itself; torch 2.11 does not, and there the check, which
# returns nothing, was dead code to the re-trace of run_decompositions: a singular matrix then gave
# inf/NaN from the compiled model instead of eager's LinAlgError.
if _get_effect(torch.ops.aten._linalg_check_errors.default) is None:
    _register_effectful_op(torch.ops.aten._linalg_check_errors.default, _EffectType.ORDERED)


def require(ok: torch.Tensor, what: str) -> None:
    """Inside a decomposition: the compiled model must verify `ok.all()` after running, and run
    the call eagerly when it does not hold. `what` names the condition for `explain`."""
    torch.ops.uniorch.require(ok, what)


CHECK_OPS = {
    torch.ops.uniorch.require.default: "require",
    torch.ops.aten._linalg_check_errors.default: "linalg_check_errors",
}


def as_output_spec(op, args: tuple, kwargs: dict) -> dict:
    """What a check node means, as JSON (bundles store it with the graph's outputs)."""
    kind = CHECK_OPS[op]
    if kind == "require":
        return {"op": kind, "what": str(args[1])}
    is_matrix = kwargs.get("is_matrix", args[2] if len(args) > 2 else True)
    return {"op": kind, "api": str(args[1]), "is_matrix": bool(is_matrix)}
