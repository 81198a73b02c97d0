"""Names of uniorch's passes → lazy factories, so `uniorch-opt --help` starts without importing them."""
from __future__ import annotations

import importlib

# name -> "module:Class" under uniorch.passes; tests assert each name matches its class's `name`.
_PASSES = {
    "uniorch-torch-backend": "stage_lowering:TorchBackend",
    "uniorch-torch-to-linalg": "stage_lowering:TorchToLinalg",
    "uniorch-verify-linalg": "verify_linalg:VerifyLinalg",
    "uniorch-op-stats": "op_stats:OpStats",
    "uniorch-fuse": "fuse:Fuse",
    "uniorch-fuse-attention": "fuse_attention:FuseAttention",
    "uniorch-fuse-chain": "fuse_chain:FuseChain",
    "uniorch-fuse-siblings": "fuse_siblings:FuseSiblings",
    "uniorch-fuse-depthwise": "fuse_depthwise:FuseDepthwise",
    "uniorch-fuse-row-stats": "fuse_row_stats:FuseRowStats",
    "uniorch-fuse-operand-sums": "fuse_operand_sums:FuseOperandSums",
    "uniorch-preprocess": "preprocess:Preprocess",
    "uniorch-schedule": "schedule:Schedule",
    "uniorch-concat-in-place": "concat_in_place:ConcatInPlace",
    "uniorch-plan-memory": "plan_memory:PlanMemory",
}


def names() -> list[str]:
    return sorted(_PASSES)


def is_registered(name: str) -> bool:
    return name in _PASSES


def get(name: str):
    """The Pass subclass registered as `name` (KeyError if none)."""
    module_name, cls_name = _PASSES[name].split(":")
    module = importlib.import_module(f"uniorch.passes.{module_name}")
    return getattr(module, cls_name)
