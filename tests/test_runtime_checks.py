"""Run-time checks left in the graph (capture/checks.py): ATen's `_linalg_check_errors` raises
eager's error from a compiled model, and a failed `require` re-runs the call eagerly instead of
returning a compiled result whose rewrite did not hold."""
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
    python_runs = []

    def f(x):
        python_runs.append(1)  # the function's Python body runs at capture and in eager re-runs only
        y = torch.sin(x) * 3
        require(y.abs() <= 3, "sin is bounded")
        require(x.sum() > 0, "positive sum")
        return y + 1

    cm = uniorch.compile(f, target="interpret")
    x = torch.rand(16) + 0.1
    torch.testing.assert_close(cm(x), torch.sin(x) * 3 + 1)
    rep = uniorch.explain(f, x, target="interpret")
    assert not rep.fallbacks, rep
    runs = len(python_runs)
    torch.testing.assert_close(cm(x + 1), torch.sin(x + 1) * 3 + 1)
    assert len(python_runs) == runs  # compiled, checks held
    torch.testing.assert_close(cm(-x), torch.sin(-x) * 3 + 1)
    assert len(python_runs) == runs + 1  # the sum check failed: eager ran


def test_bundles_keep_their_checks(tmp_path):
    def f(a):
        return torch.linalg.inv(a) - 1

    a = torch.randn(3, 3) + 3 * torch.eye(3)
    uniorch.compile_aot(f, (a,), target="interpret").save(str(tmp_path / "inv"))
    loaded = uniorch.load(str(tmp_path / "inv"))
    torch.testing.assert_close(loaded(a), f(a))
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        loaded(torch.zeros(3, 3))
