"""Run-time checks left in the graph (capture/checks.py): ATen's `_linalg_check_errors` raises
eager's error from a compiled model, and a failed `require` re-runs the call eagerly instead of
returning a compiled result whose rewrite did not hold."""
import types

import pytest
import torch

import uniorch
from uniorch.capture.checks import require

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_singular_matrix_raises_eagers_error():
    def f(a):
        return torch.linalg.inv(a) * 2

    cm = uniorch.compile(f, target="interpret")
    a = torch.randn(4, 4) + 4 * torch.eye(4)
    torch.testing.assert_close(cm(a), f(a))
    singular = torch.randn(4, 4)
    singular[2] = singular[1]
    with pytest.raises(torch.linalg.LinAlgError) as eager:
        f(torch.zeros(3, 3))
    with pytest.raises(torch.linalg.LinAlgError) as compiled:
        cm(torch.zeros(3, 3))
    assert str(compiled.value) == str(eager.value)
    assert [c["op"] for c in uniorch.capture(f, (a,)).checks] == ["linalg_check_errors"]
    assert uniorch.explain(f, a, target="interpret").checks == ["linalg.inv: info == 0"]


def test_failed_require_reruns_eagerly():
    # an attribute of an object: a write capture does not watch (a list append would send the
    # calls through Dynamo, which replays it at every call: capture/side_effects.py)
    python_runs = types.SimpleNamespace(n=0)

    def f(x):
        python_runs.n += 1  # the function's Python body runs at capture and in eager re-runs only
        y = torch.sin(x) * 3
        require(y.abs() <= 3, "sin is bounded")
        require(x.sum() > 0, "positive sum")
        return y + 1

    cm = uniorch.compile(f, target="interpret")
    x = torch.rand(16) + 0.1
    torch.testing.assert_close(cm(x), torch.sin(x) * 3 + 1)
    rep = uniorch.explain(f, x, target="interpret")
    assert not rep.fallbacks, rep
    runs = python_runs.n
    torch.testing.assert_close(cm(x + 1), torch.sin(x + 1) * 3 + 1)
    assert python_runs.n == runs  # compiled, checks held
    torch.testing.assert_close(cm(-x), torch.sin(-x) * 3 + 1)
    assert python_runs.n == runs + 1  # the sum check failed: eager ran


def test_bundles_keep_their_checks(tmp_path):
    def f(a):
        return torch.linalg.inv(a) - 1

    a = torch.randn(3, 3) + 3 * torch.eye(3)
    uniorch.compile_aot(f, (a,), target="interpret").save(str(tmp_path / "inv"))
    loaded = uniorch.load(str(tmp_path / "inv"))
    torch.testing.assert_close(loaded(a), f(a))
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        loaded(torch.zeros(3, 3))


_WITHOUT_TORCHS_EFFECT = """
import torch
from torch._library.simple_registry import singleton
# as torch 2.11 ships it: ATen's check not marked effectful by torch itself
singleton.find("aten::_linalg_check_errors").effect._set_default_effect()
import uniorch
singular = torch.ones(3, 3)
cg = uniorch.capture(lambda a: torch.linalg.inv(a) * 2, (torch.eye(3) * 2,))
assert [o.kind for o in cg.outputs] == ["user", "check"], cg.outputs
try:
    cg(singular)
except torch.linalg.LinAlgError as exc:
    print("raised:", exc)
"""


def test_linalg_check_survives_capture_where_torch_leaves_it_unmarked():
    """torch 2.11 does not mark `_linalg_check_errors` effectful (2.13 does); capture marks it, or
    the re-trace that decomposes drops it as dead code and a singular matrix returns inf/NaN."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _WITHOUT_TORCHS_EFFECT], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "raised:" in run.stdout and "singular" in run.stdout, run.stdout
