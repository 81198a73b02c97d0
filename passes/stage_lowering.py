"""The front-end lowerings as named passes, so a pipeline can start from torch-dialect input."""
from __future__ import annotations

from dataclasses import dataclass

from uniorch.ir.stages import PIPELINES, run_pipeline_text

from .base import Pass, PassContext


@dataclass(frozen=True)
class TorchBackend(Pass):
    name = "uniorch-torch-backend"
    summary = "torch dialect as imported -> torch-mlir's backend contract (value semantics, decomposed)"

    def run(self, module, pctx: PassContext) -> None:
        run_pipeline_text(module, PIPELINES["torch"], self.name)


@dataclass(frozen=True)
class TorchToLinalg(Pass):
    name = "uniorch-torch-to-linalg"
    summary = "torch backend contract -> linalg-on-tensors, the hardware-independent graph"
    allow_non_finites: bool = True

    def run(self, module, pctx: PassContext) -> None:
        pipeline = PIPELINES["linalg"].replace(
            "backend-pipeline)", f"backend-pipeline{{allow-non-finites={str(self.allow_non_finites).lower()}}})"
        )
        run_pipeline_text(module, PIPELINES["torch"], self.name)
        run_pipeline_text(module, pipeline, self.name)
