"""torch-mlir's pipelines between the IR stages (stages.py): their own module, so that the special
functions' lowering (special.py), which stages.py calls, can read them without importing it."""
from __future__ import annotations

PIPELINES = {
    "torch": "builtin.module(func.func(torch-match-quantized-custom-ops),"
    " torchdynamo-export-to-torch-backend-pipeline)",
    "linalg": "builtin.module(torch-backend-to-linalg-on-tensors-backend-pipeline)",
}
