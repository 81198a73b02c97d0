"""The IR stages a graph goes through before fusion, and torch-mlir's pipelines between them.

    torch   torch dialect at torch-mlir's backend contract: value semantics, decomposed, shapes known
    linalg  linalg-on-tensors (+ tensor, arith, math, tm_tensor): the hardware-independent graph
            every uniorch pass works on
"""
from __future__ import annotations

from torch_mlir import ir
from torch_mlir.passmanager import PassManager

from ..errors import LoweringError
from .diagnostics import from_error
from .pipelines import PIPELINES

STAGES = ("torch", "linalg")


def stage_of(module: ir.Module) -> str:
    """`torch` while any torch-dialect op is left, else `linalg`."""
    found = []

    def visit(op):
        if op.name.startswith(("torch.", "torch_c.")):
            found.append(op.name)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return "torch" if found else "linalg"


def run_pipeline_text(module: ir.Module, pipeline: str, what: str, ir_printing: dict | None = None) -> None:
    with module.context:
        pm = PassManager.parse(pipeline)
        if ir_printing:
            pm.enable_ir_printing(**ir_printing)
        try:
            pm.run(module.operation)
        except ir.MLIRError as err:
            raise LoweringError(f"{what} failed", from_error(err)) from None


def lower(module: ir.Module, to: str) -> ir.Module:
    """Lowers in place from the module's current stage up to `to` (a no-op when already there)."""
    if to not in STAGES:
        raise ValueError(f"unknown stage {to!r}; known: {', '.join(STAGES)}")
    start = STAGES.index(stage_of(module))
    special = False
    if start == 0:
        # special functions torch-mlir cannot lower become linalg.generic ops codegen knows
        from .special import rewrite_special_functions

        special = rewrite_special_functions(module) > 0
        # Raw torch from the importer and torch at the backend contract look alike; the
        # contract pipeline is idempotent, so always run it before linalg.
        run_pipeline_text(module, PIPELINES["torch"], "lowering to torch backend contract")
    for stage in STAGES[1 : STAGES.index(to) + 1]:
        if STAGES.index(stage) > start or start == 0:
            if stage == "linalg" and special:
                # torch-mlir's final contract check rejects the special functions' body calls
                # (uniorch/ir/special.py); the same pipeline without it, then our own check
                from .special import check_linalg_contract, linalg_pipeline_without_verifier

                run_pipeline_text(module, linalg_pipeline_without_verifier(module.context), f"lowering torch to {stage}")
                check_linalg_contract(module)
                continue
            run_pipeline_text(module, PIPELINES[stage], f"lowering torch to {stage}")
    return module
