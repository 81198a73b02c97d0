import os

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _fresh_seed():
    """Inputs are fresh per test run: seeded from the OS, printed on failure via the test id."""
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    yield


def pytest_collection_modifyitems(config, items):
    """The second run of the Triton-facing tests, in the GPU machine's Triton (scripts/test.sh sets
    UNIORCH_COMPAT_RUN), checks what that machine compiles: kernels cross-compiled for other
    targets (AMD, older NVIDIA archs) are checked in the main run, with the newest Triton."""
    if not os.environ.get("UNIORCH_COMPAT_RUN"):
        return
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        targets = [v for v in params.values() if isinstance(v, str) and v.startswith(("cuda:", "rocm:", "cann:"))]
        (drop if any(t != "cuda:sm_90" for t in targets) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
