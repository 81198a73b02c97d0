"""Every zoo model cross-compiles for cuda:sm_90, rocm:gfx942 and cann on a CPU-only machine:
captured, lowered, scheduled for the real target, every kernel generated and taken through the
backend's stages to its binary (cubin / hsaco) or hand-off (cann), every PTX accepted by ptxas. Kernels that codegen marks
`uniorch.unsupported` run eagerly: counted, not failures.

Cross-compiling costs 5-50 s per model and target on one core, so CI runs a representative subset
(a contraction chain, attention, convolutions and pools, scans and arg-reductions) and
`UNIORCH_SLOW_TESTS=1` runs the whole zoo.
"""
from __future__ import annotations

import functools

import pytest

from cross_util import cross_compile, ptxas_tools
from test_models import MODEL_NAMES, load

from uniorch import config

TARGETS = ("cuda:sm_90", "rocm:gfx942", "cann:ascend910b")
CI_SUBSET = {"mlp", "attention_manual", "cnn_pools", "masked_cumsum_argmax"}
PARAMS = [
    pytest.param(name, marks=pytest.mark.skipif(
        not config.flag("UNIORCH_SLOW_TESTS") and name not in CI_SUBSET,
        reason="cross-compiling the whole zoo takes minutes; run it with UNIORCH_SLOW_TESTS=1"))
    for name in MODEL_NAMES
]


@functools.lru_cache(maxsize=None)
def linalg_text(name: str) -> str:
    """The model at the linalg stage (with locations), captured once for both targets."""
    from uniorch.ir import to_mlir

    model, args, kwargs = load(name)
    return to_mlir(model, args, kwargs).operation.get_asm(enable_debug_info=True)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", PARAMS)
def test_model_cross_compiles(name, target, tmp_path, monkeypatch):
    monkeypatch.setenv("UNIORCH_CACHE_DIR", str(tmp_path))  # compile for real, not from a cache
    check_ptx = bool(ptxas_tools())
    rep = cross_compile(name, linalg_text(name), target, check_ptx=check_ptx)
    print(f"{name} {target}: {rep.kernels} kernels, {len(rep.unsupported)} eager, "
          f"{rep.ptxas_ok} ptxas ok, {rep.seconds:.1f} s")
    assert not rep.failures, "\n".join(f"{k}: {why}" for k, why in rep.failures)
    assert rep.kernels > 0
    if target.startswith("cuda") and check_ptx:
        assert rep.ptxas_ok == rep.kernels
