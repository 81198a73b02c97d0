"""On the interpreter, compiling runs no trial launch (runtime/compiler.py `TRIAL_ON_INTERPRETER`):
a kernel the interpreter rejects fails the first call, and its region runs in PyTorch, reported as
a launch fallback; `explain` still trial-launches, so it names the kernel and its ops fall back
before any call. Kernels are made to fail by a launch that raises for every kernel but the
matmul's."""
import pytest
import torch

import uniorch
from uniorch.runtime import compiler


class _LinearSoftmax(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 32)

    def forward(self, x):
        return torch.softmax(self.proj(x), dim=-1) * 3.0


@pytest.fixture
def rejecting_launch(monkeypatch):
    real = compiler._launch
    rejected = []

    def launch(kernel, ins, outs, sizes=None):
        if "contraction" not in kernel.name:
            rejected.append(kernel.name)
            raise RuntimeError(f"the interpreter rejects {kernel.name}")
        return real(kernel, ins, outs, sizes)

    monkeypatch.setattr(compiler, "_launch", launch)
    return rejected


def test_compiling_launches_nothing_before_the_first_call(monkeypatch):
    torch.manual_seed(0)
    model, x = _LinearSoftmax(), torch.randn(4, 16)
    launched = []
    real = compiler._launch

    def launch(kernel, ins, outs, sizes=None):
        launched.append(kernel.name)
        return real(kernel, ins, outs, sizes)

    monkeypatch.setattr(compiler, "_launch", launch)
    cm = uniorch.compile(model, target="interpret")
    out = cm(x)
    monkeypatch.undo()
    torch.testing.assert_close(out, model(x))
    rep = cm.explain()
    assert not rep.fallbacks and rep.kernels, rep
    # each kernel launched once: by the call, none by a trial before it
    assert sorted(launched) == sorted(k.name for k in rep.kernels), launched
    assert not any("first launch" in t for t in rep.timings), rep.timings


def test_a_kernel_rejected_at_the_first_call_runs_its_region_eagerly(rejecting_launch):
    torch.manual_seed(0)
    model = _LinearSoftmax()
    cm = uniorch.compile(model, target="interpret")
    for _ in range(2):  # the failure is kept: the second call runs the region in PyTorch at once
        x = torch.randn(4, 16)
        torch.testing.assert_close(cm(x), model(x))
    assert len(rejecting_launch) == 1, rejecting_launch
    rep = cm.explain()
    assert rep.fallbacks and all(f.stage == "launch" for f in rep.fallbacks), rep
    assert any(rejecting_launch[0] in f.why for f in rep.fallbacks), rep


def test_explain_on_the_interpreter_trial_launches_and_names_the_kernel(rejecting_launch):
    torch.manual_seed(0)
    model, x = _LinearSoftmax(), torch.randn(4, 16)
    rep = uniorch.explain(model, x, target="interpret")
    assert rejecting_launch, "explain launched no kernel"
    launch = [f for f in rep.fallbacks if f.stage == "launch"]
    assert launch and rejecting_launch[0] in launch[0].why, rep
    assert any(f.op == "aten._softmax.default" for f in launch), rep
