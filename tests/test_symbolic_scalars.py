"""Floats computed from symbolic sizes (a mean's 1 / n, `x.shape[0] / 2`, batch norm's backward).

A graph compiled for many sizes reads such a value at run time. It once came back truncated to an
integer (1 / 8 as 0: BatchNorm's input gradient was wrong after a batch-size change, silently),
`torch.sym_float` did not import, and kernels taking such a float fell back to PyTorch."""
import copy

import pytest
import torch
from torch import nn

import uniorch


def _per_size(fn, sizes=(8, 3, 5), seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(n, 6, generator=gen) for n in sizes]


@pytest.mark.parametrize("name,fn", [
    ("reciprocal", lambda x: x.sum(0) * (1.0 / x.shape[0])),
    ("half", lambda x: x.sum(0) * (x.shape[0] / 2)),
    ("ratio", lambda x: (x - x.mean(0)) * (1.0 / (x.shape[0] * x.shape[1] / x.shape[1]))),
    ("unbiased", lambda x: x.pow(2).sum(0) * (x.shape[0] / (x.shape[0] - 1))),
    ("inverse_root", lambda x: x * x.shape[0] ** -0.5),  # attention's scale, q.shape[-1] ** -0.5
    ("root", lambda x: x.sum(0) / x.shape[0] ** 0.5),
])
def test_floats_of_sizes_as_eager_in_kernels(name, fn):
    cm = uniorch.compile(fn, dynamic=True, fallback="error")
    for x in _per_size(fn):
        torch.testing.assert_close(cm(x), fn(x))
    assert not cm.explain(x).fallbacks


@pytest.mark.parametrize("norm", ["bn1d", "bn2d"])
def test_batch_norm_trains_as_eager_when_the_batch_size_changes(norm):
    """The last batch of an epoch is smaller: the backward compiled for every batch size gives
    eager's gradients at each, in kernels."""
    torch.manual_seed(3)
    if norm == "bn1d":
        model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
        shape = (6,)
    else:
        model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                              nn.Linear(4 * 5 * 5, 2))
        shape = (3, 5, 5)
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model)
    gen = torch.Generator().manual_seed(4)
    for n in (8, 3, 5, 8):
        x = torch.randn(n, *shape, generator=gen)
        xc, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        cm(xc).pow(2).sum().backward()
        ref(xe).pow(2).sum().backward()
        torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-4, atol=1e-5)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None
        for b, c in zip(model.buffers(), ref.buffers()):
            torch.testing.assert_close(b, c)
    report = cm.explain(xc)
    assert report.backward.kernels and not report.backward.fallbacks, [f.why for f in report.backward.fallbacks]


def test_a_mean_over_the_batch_differentiates_in_kernels_at_any_batch_size():
    """The backward of `x - x.mean(0)` sums over the (symbolic) batch with a sequential combiner:
    its kernel loops over the rows instead of failing to decide whether they fit one block."""

    class Centre(nn.Module):
        def forward(self, x):
            return (x - x.mean(0)) * 2

    cm = uniorch.compile(Centre())
    for x in _per_size(None):
        xc, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
        g = torch.randn_like(x)
        cm(xc).backward(g)
        Centre()(xe).backward(g)
        torch.testing.assert_close(xc.grad, xe.grad)
    assert not cm.explain(xc).backward.fallbacks


def test_a_label_smoothed_contrastive_loss_trains_as_eager_at_any_batch_size():
    """A CLIP-style loss: cross-entropy with label smoothing divides 0.1 by the (symbolic) class
    count, a float constant no size expression took before, so half the graph ran in PyTorch."""
    import torch.nn.functional as F

    class Clip(nn.Module):
        def __init__(self):
            super().__init__()
            self.img, self.txt = nn.Linear(20, 8), nn.Linear(12, 8)
            self.logit_scale = nn.Parameter(torch.tensor(2.659))

        def forward(self, a, b):
            i, t = F.normalize(self.img(a), dim=-1), F.normalize(self.txt(b), dim=-1)
            logits = self.logit_scale.exp().clamp(max=100) * i @ t.T
            y = torch.arange(a.shape[0])
            return (F.cross_entropy(logits, y, label_smoothing=0.1) + F.cross_entropy(logits.T, y, label_smoothing=0.1)) / 2

    torch.manual_seed(6)
    model = Clip()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model)
    gen = torch.Generator().manual_seed(7)
    for n in (6, 4, 5):
        a, b = torch.randn(n, 20, generator=gen), torch.randn(n, 12, generator=gen)
        got, want = cm(a, b), ref(a, b)
        got.backward()
        want.backward()
        torch.testing.assert_close(got, want)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad = q.grad = None
    report = cm.explain(a, b)
    assert not report.fallbacks and not report.backward.fallbacks


def test_attention_scaled_by_the_root_of_a_symbolic_head_dim_is_one_compile():
    """`q.shape[-1] ** -0.5` at symbolic sizes (every dim is under dynamic=True): a square root of a
    size, computed in double by the kernel, where it fell back to PyTorch whole."""
    def attn(q, k, v):
        return ((q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5).softmax(-1) @ v

    cm = uniorch.compile(attn, dynamic=True, fallback="error")
    gen = torch.Generator().manual_seed(1)
    for t, d in [(5, 8), (7, 3), (4, 6)]:
        q, k, v = (torch.randn(2, t, d, generator=gen) for _ in range(3))
        torch.testing.assert_close(cm(q, k, v), attn(q, k, v))
    report = cm.explain(q, k, v)
    assert not report.fallbacks and "recompil" not in str(report).split("symbolic sizes")[0]


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
def test_root_of_a_size_compiles_for_gpu_targets(target):
    art = uniorch.compile_aot(lambda x: x * x.shape[0] ** -0.5, (torch.randn(5, 3),), target=target, dynamic=True)
    assert not art.fallbacks and art.kernels
