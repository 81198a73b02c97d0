"""The optimizer step compiled (`uniorch.compile(opt)` / `uniorch.compile(opt.step)`): parameters and
state equal to eager torch.optim's after several steps, on fresh random data."""
import copy
import warnings

import pytest
import torch
from torch import nn

import uniorch

OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05),
    "adam_amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True, weight_decay=0.01),
    "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4),
    "sgd_dampening": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8, dampening=0.1, maximize=True),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
}


def _mlp(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))


def _backward(model, x):
    model(x).pow(2).mean().backward()


def _train_together(runs, steps: int, seed: int) -> None:
    """`steps` steps of each (model or its compiled form, optimizer) pair on the same fresh inputs."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=gen)
        for model, opt in runs:
            opt.zero_grad()
            _backward(model, x)
            opt.step()


def _rel(a, b):
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item()


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_step_matches_eager_with_an_lr_schedule(name):
    ref = _mlp(0)
    mine = copy.deepcopy(ref)
    eager_opt, opt = OPTIMIZERS[name](ref.parameters()), OPTIMIZERS[name](mine.parameters())
    scheds = [torch.optim.lr_scheduler.StepLR(o, 1, gamma=0.5) for o in (eager_opt, opt)]
    step = uniorch.compile(opt.step, "interpret")  # the scheduler's wrapper of step(), as users hold it
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        x = torch.randn(8, 16, generator=gen)
        for model, o in ((ref, eager_opt), (mine, opt)):
            o.zero_grad()
            _backward(model, x)
        eager_opt.step()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no "lr_scheduler.step() before optimizer.step()"
            step()
            for s in scheds:
                s.step()
    for a, b in zip(mine.parameters(), ref.parameters()):
        assert _rel(a.detach(), b.detach()) <= 1e-5
    for a, b in zip(mine.parameters(), ref.parameters()):
        for key, value in eager_opt.state[b].items():
            got = opt.state[a][key]
            assert _rel(got.float().cpu(), value.float()) <= 1e-5, key
    compiled = step.__self__
    # the learning rate is a tensor argument: halving it every step compiled the update once (SGD
    # with momentum: once more for its first step, which makes the buffers); no step ran eagerly
    momentum = bool(opt.param_groups[0].get("momentum"))
    assert [cm.cache_size for cm in compiled._compiled.values()] == [1] * (1 + momentum)
    assert compiled.eager_steps == []


def test_explain_reports_the_update_kernels():
    model = _mlp(2)
    opt = uniorch.compile(torch.optim.AdamW(model.parameters(), lr=1e-3), "interpret")
    _backward(model, torch.randn(4, 16))
    opt.step()
    report = opt.explain()
    assert report.kernels and not report.fallbacks
    assert report.compiled_ops == report.captured_ops
    # one pass over each parameter's tensors: p, grad, exp_avg, exp_avg_sq read, p and both averages written
    numel = sum(p.numel() for p in model.parameters())
    assert report.bytes_moved <= 1.5 * 7 * 4 * numel


def test_groups_with_their_own_hyperparameters():
    ref = _mlp(3)
    mine = copy.deepcopy(ref)

    def groups(m):
        return [{"params": m[0].parameters(), "lr": 1e-2}, {"params": m[2].parameters(), "lr": 1e-3, "betas": (0.8, 0.9)}]

    eager_opt, opt = torch.optim.Adam(groups(ref)), uniorch.compile(torch.optim.Adam(groups(mine)), "interpret")
    _train_together([(ref, eager_opt), (mine, opt)], 3, seed=4)
    for a, b in zip(mine.parameters(), ref.parameters()):
        assert _rel(a.detach(), b.detach()) <= 1e-5


def test_compiled_training_step_end_to_end():
    """Compiled forward and backward (training path) and compiled AdamW, three steps."""
    ref = _mlp(4)
    mine = copy.deepcopy(ref)
    eager_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = uniorch.compile(torch.optim.AdamW(mine.parameters(), lr=1e-2), "interpret")
    _train_together([(ref, eager_opt), (uniorch.compile(mine, "interpret"), opt)], 3, seed=5)
    for a, b in zip(mine.parameters(), ref.parameters()):
        assert _rel(a.detach(), b.detach()) <= 1e-5


def test_an_optimizer_without_a_compiled_update_steps_eagerly():
    ref = _mlp(5)
    mine = copy.deepcopy(ref)
    eager_opt = torch.optim.RMSprop(ref.parameters(), lr=1e-2)
    with pytest.warns(UserWarning, match="RMSprop has no compiled update"):
        opt = uniorch.compile(torch.optim.RMSprop(mine.parameters(), lr=1e-2), "interpret")
    x = torch.randn(8, 16)
    for m, o in ((ref, eager_opt), (mine, opt)):
        _backward(m, x)
        o.step()
    for a, b in zip(mine.parameters(), ref.parameters()):
        assert torch.equal(a, b)
    assert "RMSprop" in opt.explain().fallbacks[0].why


def test_a_write_into_a_global_tensor_happens_once():
    """A tensor the function reaches outside its arguments is real while export traces: the write
    must not run during the failed capture and again in what runs the call instead (Dynamo, which
    makes the write part of its graph)."""
    counter = torch.zeros(3)

    def fn(x):
        counter.add_(1)
        return x * counter

    compiled = uniorch.compile(fn, "interpret")
    for step in (1, 2):
        out = compiled(torch.ones(3))
        assert torch.equal(counter, torch.full((3,), float(step))) and torch.equal(out, counter)
    rep = compiled.explain()
    assert "add_ writes into a (3,) tensor that is not an argument" in rep.capture_note, str(rep)
    assert not rep.fallbacks and rep.kernels, str(rep)


def test_updates_of_differently_shaped_parameters_are_not_multiplied_together():
    """Every parameter's update reads the same step count and learning rate (0-d); fusion once
    laid them out over one domain, the product of all their shapes (a GPT-2 block's AdamW step ran
    12.5 M lanes for 20 K elements, 100 s a step on the interpreter). No kernel may run more
    lanes than the largest parameter has elements."""
    import math
    import re

    torch.manual_seed(12)
    model = nn.Sequential(nn.Linear(32, 96), nn.GELU(), nn.Linear(96, 32), nn.LayerNorm(32), nn.Linear(32, 128))
    opt = uniorch.compile(torch.optim.AdamW(model.parameters(), lr=1e-3), "interpret")
    model(torch.randn(4, 32)).pow(2).mean().backward()
    opt.step()
    report = opt.explain()
    largest = max(p.numel() for p in model.parameters())
    assert report.kernels
    for k in report.kernels:
        dims = re.search(r"# domain: parallel \[([^\]]*)\]", k.source)
        lanes = math.prod(int(d) for d in dims.group(1).split(",")) if dims and dims.group(1).strip() else 1
        assert lanes <= largest, (k.name, dims.group(0))


def test_the_learning_rate_is_never_copied_from_host_memory(monkeypatch):
    """A step builds its learning-rate tensor by a fill, once per value: `torch.tensor(lr, device=...)`
    copies from host memory, and on a GPU that copy waits for every queued kernel (the whole
    backward) each step. A schedule's new value is still the one the update uses."""
    ref = _mlp(0)
    mine = copy.deepcopy(ref)
    eager_opt, opt = torch.optim.AdamW(ref.parameters(), lr=1e-2), torch.optim.AdamW(mine.parameters(), lr=1e-2)
    compiled = uniorch.compile(opt, target="interpret")
    runs = [(ref, eager_opt), (mine, compiled)]
    _train_together(runs, 1, seed=3)  # compiles
    real = torch.tensor

    def no_host_copies(data, *args, **kwargs):
        raise AssertionError(f"torch.tensor({data!r}) in a compiled step")

    monkeypatch.setattr(torch, "tensor", no_host_copies)
    _train_together(runs, 2, seed=4)
    for group in (eager_opt.param_groups[0], opt.param_groups[0]):
        group["lr"] = 3e-3  # a new value: a new fill, still no copy
    _train_together(runs, 2, seed=5)
    monkeypatch.setattr(torch, "tensor", real)
    for p, r in zip(mine.parameters(), ref.parameters()):
        assert _rel(p.detach(), r.detach()) < 1e-5
    assert len(compiled._lrs) == 2
