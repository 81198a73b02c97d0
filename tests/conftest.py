import os

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _fresh_seed():
    """Inputs are fresh per test run: seeded from the OS, printed on failure via the test id."""
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    yield


# Files of one kernel feature each (a fusion, a layout, a tile choice): in the second run only their
# tests that compile for a GPU, since what that run checks is that the GPU machine's Triton compiles
# what uniorch generates; their numerics on the interpreter are the first run's.
COMPILE_CHECKS_ONLY = {
    f"test_{name}.py" for name in (
        "chain_fusion", "sibling_fusion", "fma_relayout", "fp32_precision", "causal_bound", "conv_channels_last",
        "gather_prologue", "tile_stats", "chain_lead", "conv_views", "scatter_updates", "chain_depthwise",
        "depthwise_prologue", "shared_memory_fit", "grouped_mm", "gated_split", "gated_siblings", "attention_lse",
        "attention_band_split", "relayout_copy")
}


def _compiles_for_a_gpu(item) -> bool:
    import inspect

    try:
        src = inspect.getsource(item.function)
    except (OSError, TypeError):
        return True
    return any(s in src for s in ("cuda:", "sm_90", "sm90", "compile_aot", "rocm:", "ptx"))


# The files that take longest on 2 cores (test-seconds, 2026-12-05), handed to workers first
# (scripts/test.sh passes --no-loadscope-reorder): xdist's own order, by number of tests, left the
# one-test lit suite (2.5 min) for last, and one worker ran it alone at the end of every run.
FIRST = ("test_lit.py", "test_transformers_defaults.py", "test_dynamic_shapes.py", "test_training.py",
         "test_kernel_report.py", "test_tile_stats.py", "test_cpu_backend.py", "test_grouped_mm.py",
         "test_models.py", "test_norm_linear_fusion.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))  # stable: the rest as collected
    _compat_selection(config, items)


def _compat_selection(config, items):
    """The second run of the Triton-facing tests, in the GPU machine's Triton (scripts/test.sh sets
    UNIORCH_COMPAT_RUN), checks what that machine compiles: kernels cross-compiled for other
    targets (AMD, older NVIDIA archs) are checked in the main run, with the newest Triton, and so
    are the kernel-feature files' numerics on the interpreter (COMPILE_CHECKS_ONLY)."""
    if not os.environ.get("UNIORCH_COMPAT_RUN"):
        return
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        targets = [v for v in params.values() if isinstance(v, str) and v.startswith(("cuda:", "rocm:", "cann:"))]
        other_arch = any(t != "cuda:sm_90" for t in targets)
        interpreter_only = item.path.name in COMPILE_CHECKS_ONLY and not targets and not _compiles_for_a_gpu(item)
        (drop if other_arch or interpreter_only else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
