"""A whole train step compiled as one function (capture/train_steps.py): forward, backward and
optimizer step go through Dynamo, split where torch.compile splits them, and match eager step for
step; before, the trace's backward left FakeTensor gradients and optimizer state behind."""
import copy
import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _model():
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))


def _close(a: nn.Module, b: nn.Module):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5, msg=name)


def test_forward_and_backward_in_one_function_leave_real_gradients():
    eager, comp = _model(), None
    comp = copy.deepcopy(eager)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, comp)]

    def fwd_bwd(model):
        def fn(x):
            loss = model(x).pow(2).mean()
            loss.backward()
            return loss.detach()
        return fn

    fe, fc = fwd_bwd(eager), uniorch.compile(fwd_bwd(comp), target="interpret")
    for _ in range(3):
        x = torch.randn(5, 8)
        torch.testing.assert_close(fc(x), fe(x))
        assert all(type(p.grad) is torch.Tensor for p in comp.parameters())
        for o in opts:
            o.step()
            o.zero_grad()
        _close(comp, eager)


@pytest.mark.parametrize("opt", [torch.optim.Adam, torch.optim.AdamW, torch.optim.RMSprop])
def test_an_optimizer_step_wrapped_in_a_function_updates_as_eager(opt):
    eager = _model()
    comp = copy.deepcopy(eager)
    oe, oc = opt(eager.parameters(), lr=0.05), opt(comp.parameters(), lr=0.05)

    def fn():
        oc.step()

    cfn = uniorch.compile(fn, target="interpret")
    for _ in range(3):
        x = torch.randn(5, 8)
        for m in (eager, comp):
            m.zero_grad()
            m(x).pow(2).mean().backward()
        oe.step()
        cfn()
        _close(comp, eager)
    assert all(type(v) is torch.Tensor for s in oc.state.values() for v in s.values())


def test_a_train_step_runs_its_python_once_per_call_even_when_named_step():
    """It draws its own batch (`next`) and is called `step`, with the optimizer in its closure:
    not taken for the optimizer's own step, and the first call does not draw twice."""
    def make():
        model = _model()
        batches = iter([(torch.randn(4, 8), torch.randn(4, 4)) for _ in range(5)])
        opt = torch.optim.AdamW(model.parameters(), lr=0.05)
        drawn = itertools.count()

        def step():
            x, y = next(batches)
            next(drawn)
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss.detach()
        return model, step, drawn

    torch.manual_seed(3)
    eager, step_e, _ = make()
    torch.manual_seed(3)
    comp, step_c, drawn = make()
    step_c = uniorch.compile(step_c, target="interpret")
    for _ in range(4):
        torch.testing.assert_close(step_c(), step_e())
    assert next(drawn) == 4
    _close(comp, eager)


def test_a_backward_found_while_tracing_stops_the_trace_first():
    """The backward is in a helper the step calls: found at the call, before any gradient is written."""
    def helper(loss):
        loss.backward()

    eager = _model()
    comp = copy.deepcopy(eager)

    def fn(model):
        return lambda x: helper(model(x).sum()) or model[0].weight.grad.clone()

    fc = uniorch.compile(fn(comp), target="interpret")
    for _ in range(2):
        x = torch.randn(3, 8)
        torch.testing.assert_close(fc(x), fn(eager)(x))
    assert "backward" in fc.explain(torch.randn(3, 8)).capture_note


class _Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 4)
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        self.count += 1  # reassigns the buffer: PyTorch's registration hooks run
        return self.l(x) * self.count


def test_a_buffer_reassigned_in_forward_does_not_recompile_every_step():
    eager = _Counting()
    comp = copy.deepcopy(eager)
    cm = uniorch.compile(comp, target="interpret")
    for _ in range(5):
        x = torch.randn(3, 8)
        cm(x).sum().backward()
        eager(x).sum().backward()
    assert len(cm.training_compile.forward) == 1
    torch.testing.assert_close(comp.count, eager.count)
    torch.testing.assert_close(comp.l.weight.grad, eager.l.weight.grad)
