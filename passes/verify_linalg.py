"""Checks the graph is uniorch's hardware-independent form: tensors only, no torch or memref ops.

Every later pass (fusion, scheduling, codegen) assumes this contract; a leftover op is reported at
its own location, which for captured models is the user's source line.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from uniorch.errors import LoweringError
from uniorch.ir.diagnostics import Diagnostic, from_location

from .base import Pass, PassContext

ALLOWED_DIALECTS = ("builtin", "func", "linalg", "tensor", "arith", "math", "tm_tensor", "ml_program", "complex", "scf")


@dataclass(frozen=True)
class VerifyLinalg(Pass):
    name = "uniorch-verify-linalg"
    summary = "fail, naming op and source line, if anything but linalg-on-tensors and friends is left"

    def run(self, module, pctx: PassContext) -> None:
        bad: list[Diagnostic] = []

        def visit(op):
            dialect = op.name.split(".", 1)[0]
            if dialect not in ALLOWED_DIALECTS:
                file, line, col = from_location(str(op.location))
                bad.append(Diagnostic(f"'{op.name}' is not part of the linalg-on-tensors graph", "error", file, line, col))
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        if bad:
            raise LoweringError(f"{self.name}: {len(bad)} op(s) outside the linalg-on-tensors contract", bad)
