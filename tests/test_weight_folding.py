"""`uniorch.compile(model, freeze=True)` computes what reads weights alone once (runtime/weight_folding.py):
autocast's weight casts, weight norm, weight standardization, an eval BatchNorm's scale. Judged
against eager PyTorch on fresh inputs, before and after the weights change in place, and by explain's
bytes against the weights' own sizes."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch
from uniorch.api import explain_static
from uniorch.runtime import frozen_layouts, weight_folding


@pytest.fixture(autouse=True)
def _fresh_registry():
    frozen_layouts.forget()
    yield
    frozen_layouts.forget()


@pytest.fixture
def folds(monkeypatch):
    """How many times a fold ran (PyTorch computing the weight-only nodes)."""
    ran = []
    real = weight_folding.WeightFold.run

    def counting(self, sources):
        ran.append(len(sources))
        return real(self, sources)

    monkeypatch.setattr(weight_folding.WeightFold, "run", counting)
    return ran


class WeightNormConv(nn.Module):
    """A HiFi-GAN/wav2vec2-style convolution under weight norm (g * v / ||v|| at every call)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(8, 16, 5, padding=2))
        self.out = nn.Linear(16, 4)

    def forward(self, x):
        return self.out(F.gelu(self.conv(x)).transpose(1, 2))


class StdConv(nn.Module):
    """timm's ScaledStdConv2d: each filter standardised over its inputs before the convolution."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(12, 6, 3, 3))
        self.gain = nn.Parameter(torch.rand(12, 1, 1, 1) + 0.5)

    def forward(self, x):
        w = F.batch_norm(self.weight.reshape(1, 12, -1), None, None, weight=(self.gain * 54 ** -0.5).view(-1),
                         training=True, momentum=0.0, eps=1e-6).reshape_as(self.weight)
        return F.relu(F.conv2d(x, w, padding=1))


def _close(got, want, tol=1e-5):
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("make,shape", [(WeightNormConv, (2, 8, 24)), (StdConv, (2, 6, 10, 10))])
def test_folded_models_match_eager_and_fold_once(folds, make, shape):
    torch.manual_seed(0)
    model = make().eval()
    cm = uniorch.compile(model, "interpret", freeze=True)
    with torch.no_grad():
        for seed in (1, 2, 3):
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
            _close(cm(x), model(x))
        assert len(folds) == 1, "the weights did not change: one fold for three calls"
        rep = cm.explain(x)
    assert rep.folded_ops > 0 and not rep.fallbacks
    assert "computed from weights once" in str(rep)


def test_an_in_place_update_or_load_state_dict_folds_again(folds):
    torch.manual_seed(0)
    model = WeightNormConv().eval()
    cm = uniorch.compile(model, "interpret", freeze=True)
    x = torch.randn(2, 8, 24)
    with torch.no_grad():
        cm(x)
        model.conv.parametrizations.weight.original1.mul_(-0.5)  # v: an optimizer's in-place step
        _close(cm(x), model(x))
        assert len(folds) == 2
        other = WeightNormConv()
        model.load_state_dict(other.state_dict())
        _close(cm(x), model(x))
        assert len(folds) == 3
        cm(x)
        assert len(folds) == 3


def test_autocast_weight_casts_are_kept_in_bf16():
    """CPU autocast casts each fp32 weight to bf16 and back before its matmul: folded, the kernels
    read the weights' bf16 copies, half their fp32 bytes."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)).eval()
    x = torch.randn(4, 64)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = model(x)
        plain = uniorch.compile(model, "interpret")
        frozen = uniorch.compile(model, "interpret", freeze=True)
        _close(frozen(x).float(), want.float(), 1e-2)
        _close(frozen(x), plain(x), 0)  # the same roundings, computed once instead of per call
        plain_rep, frozen_rep = plain.explain(x), frozen.explain(x)
    before, after = plain_rep.bytes_moved, frozen_rep.bytes_moved
    assert before - after >= 0.45 * weight_bytes, (before, after, weight_bytes)
    # the minimum counts what the kernels must read: the bf16 copies, not the fp32 weights
    assert plain_rep.bytes_minimum - frozen_rep.bytes_minimum >= 0.45 * weight_bytes
    assert frozen_rep.bytes_moved >= frozen_rep.bytes_minimum


class Mixed(nn.Module):
    """Weight-only work beside what must stay in the graph: a constant-only mask (cheaper computed
    in the kernel than read), a weight made larger (repeat), a weight scaled as it is loaded (as
    many bytes either way), an input-dependent op."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 8))
        self.b = nn.Parameter(torch.randn(8))

    def forward(self, x):
        mask = torch.arange(8).view(8, 1) >= torch.arange(8).view(1, 8)
        big = self.b.repeat(16).view(16, 8)  # 16x the bytes of b
        w = torch.tanh(self.w) * 2  # folded
        return (x @ w).masked_fill(~mask[: x.shape[0]], 0.0) + big[: x.shape[0]] + x.sum() + self.b * 0.5


def test_only_weight_work_that_saves_bytes_is_folded():
    torch.manual_seed(0)
    model = Mixed().eval()
    cm = uniorch.compile(model, "interpret", freeze=True)
    x = torch.randn(8, 8)
    with torch.no_grad():
        _close(cm(x), model(x))
    entry = next(iter(cm._cache.values()))
    targets = {n.name: str(n.target) for n in entry.captured.graph_module.graph.nodes}
    folded = {targets[n] for n in entry.program.folded_nodes}
    assert any("tanh" in t for t in folded)
    assert not any("arange" in t or "repeat" in t or "ge." in t for t in folded), folded
    main = entry.program.prelude.main
    handed = [tuple(p.meta["val"].shape) for p in main.graph.nodes if weight_folding.MARK in p.meta]
    assert handed == [(8, 8)], handed  # tanh(w) * 2 only: b * 0.5 reads as many bytes as b


def test_random_ops_and_updated_buffers_are_not_folded(folds):
    """A BatchNorm in training mode updates its running statistics each call: they are no weights
    to fold from; a weight drawn at random each call stays random."""
    torch.manual_seed(0)

    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(6)
            self.w = nn.Parameter(torch.randn(6, 6))

        def forward(self, x):
            return self.bn(x) @ (self.w * torch.rand_like(self.w))

    model = Noisy().train()
    twin = Noisy().train()
    twin.load_state_dict(model.state_dict())
    cm = uniorch.compile(model, "interpret", freeze=True)
    with torch.no_grad():
        for seed in (1, 2, 3):
            x = torch.randn(5, 6, generator=torch.Generator().manual_seed(seed))
            a, b = cm(x), cm(x)
            assert not torch.equal(a, b), "the random draw was folded into a constant"
            twin(x), twin(x)
    assert int(model.bn.num_batches_tracked) == int(twin.bn.num_batches_tracked) == 6
    assert not folds, "num_batches_tracked + 1 folded: a fold each call, as the buffer changes each call"
    _close(model.bn.running_mean, twin.bn.running_mean)
    _close(model.bn.running_var, twin.bn.running_var)


def test_a_function_of_inputs_folds_nothing_and_explain_static_sees_the_fold():
    def fn(x, w):
        return x @ torch.tanh(w)

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    assert explain_static(fn, (x, w), freeze=True).folded_ops == 0  # w is an input, not a weight
    torch.manual_seed(0)
    model = StdConv().eval()
    x = torch.randn(2, 6, 10, 10)
    plain = explain_static(model, (x,))
    frozen = explain_static(model, (x,), freeze=True)
    assert frozen.folded_ops > 0 and plain.folded_ops == 0
    # the standardisation no longer reads the filters each call: its statistics kernel goes
    assert frozen.bytes_moved < plain.bytes_moved
    assert len(frozen.kernels) < len(plain.kernels)


def test_torch_compile_freeze_option_folds(folds):
    torch.manual_seed(0)
    model = WeightNormConv().eval()
    compiled = torch.compile(model, backend="uniorch", options={"target": "interpret", "freeze": True})
    with torch.no_grad():
        for seed in (1, 2):
            x = torch.randn(2, 8, 24, generator=torch.Generator().manual_seed(seed))
            _close(compiled(x), model(x))
    torch._dynamo.reset()
    assert len(folds) == 1
