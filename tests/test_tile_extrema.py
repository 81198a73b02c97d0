"""A max or min over a convolution's or linear layer's output rows comes from per-chunk partial
maxima its epilogue writes (passes/tile_stats.py, codegen/contraction_stats.py), as sums do:
PointNet's max over points, CBAM's global max pool, a classifier's amax head. torch-mlir's forms
are normalised first (passes/plain_reductions.py): a pooling whose one window is the whole image
(adaptive_max_pool2d(x, 1)) and an amax over two dims lowered as two maxes. Numerics against
eager on fresh inputs, NaNs included (torch's max propagates them), fp32 and bf16, interpreter
and cpu backend; explain's bytes: no kernel reads the activation; the kernels compile for GPUs.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch
from uniorch.api import explain_static


class PointNet(nn.Module):
    """PointNet's shared MLP (1x1 Conv1d, eval BatchNorm, ReLU) and its max over the points."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(3, 32, 1)
        self.c2 = nn.Conv1d(32, 64, 1)
        self.bn = nn.BatchNorm1d(64)

    def forward(self, x):
        h = F.relu(self.bn(self.c2(F.relu(self.c1(x)))))
        return torch.max(h, 2, keepdim=True)[0].flatten(1)


class ChannelAttention(nn.Module):
    """CBAM: a shared MLP over the average and the max pool of a convolution's output."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1)
        self.mlp = nn.Sequential(nn.Conv2d(16, 4, 1), nn.ReLU(), nn.Conv2d(4, 16, 1))

    def forward(self, x):
        y = self.conv(x)
        w = torch.sigmoid(self.mlp(F.adaptive_avg_pool2d(y, 1)) + self.mlp(F.adaptive_max_pool2d(y, 1)))
        return y * w


class AmaxHead(nn.Module):
    """A convolution's activation reduced by amax (or amin) over the image: two dims."""

    def __init__(self, largest: bool = True):
        super().__init__()
        self.largest = largest
        self.conv = nn.Conv2d(8, 32, 3, padding=1)

    def forward(self, x):
        h = torch.relu(self.conv(x))
        return h.amax((2, 3)) if self.largest else h.amin((2, 3))


class LinearMax(nn.Module):
    """A per-point linear layer and the max over the points (dim 1): rows along the tile's M."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 64)

    def forward(self, x):
        return torch.relu(self.fc(x)).max(1).values


CASES = {
    "pointnet": (PointNet, (2, 3, 128)),
    "cbam": (ChannelAttention, (2, 8, 16, 16)),
    "amax": (AmaxHead, (2, 8, 16, 16)),
    "amin": (lambda: AmaxHead(largest=False), (2, 8, 16, 16)),
    "linear-max": (LinearMax, (2, 128, 16)),
}


def _activation_bytes(model, shape, dtype) -> int:
    """Bytes of the output of the last layer before the max: what the max would read."""
    layer = {"PointNet": "c2", "LinearMax": "fc"}.get(type(model).__name__, "conv")
    out = {}
    h = getattr(model, layer).register_forward_hook(lambda m, i, o: out.setdefault("y", o))
    with torch.no_grad():
        copy.deepcopy(model)(torch.randn(shape, dtype=dtype))
    h.remove()
    return out["y"].numel() * out["y"].element_size()


def _inputs(shape, dtype, seed: int, nan: bool):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
    if nan:  # one NaN: it reaches every max its receptive field covers
        x.view(-1)[37] = float("nan")
    return x


def _check(got, want, tol):
    assert torch.equal(got.isnan(), want.isnan()), (got, want)
    ok = ~want.isnan()
    err = (got[ok].float() - want[ok].float()).abs().max().item() / max(want[ok].float().abs().max().item(), 1e-6)
    assert err <= tol, err


FP32, BF16 = (torch.float32, 1e-5), (torch.bfloat16, 1e-2)


IN_BF16 = ("pointnet", "cbam", "amax")


@pytest.mark.parametrize("name,dtype,tol", [(n, *FP32) for n in CASES] + [(n, *BF16) for n in IN_BF16],
                         ids=[f"fp32-{n}" for n in CASES] + [f"bf16-{n}" for n in IN_BF16])
def test_max_reads_partials_not_the_activation(name, dtype, tol):
    make, shape = CASES[name]
    torch.manual_seed(3)
    model = make().eval().to(dtype)
    rep = explain_static(copy.deepcopy(model), (torch.randn(shape, dtype=dtype),))
    assert not rep.fallbacks, str(rep)
    y_bytes = _activation_bytes(model, shape, dtype)
    stats = [k for k in rep.kernels if "tile statistics" in k.source]
    assert len(stats) == 1 and stats[0].kind == "contraction", str(rep)
    comb = "_minimumf_combine" if name == "amin" else "_maximumf_combine"
    assert comb in stats[0].source, stats[0].source
    assert "(a != a), a, b)" in stats[0].source, stats[0].source  # NaN-propagating, unlike tl.max's
    # CBAM's output multiplies the activation by the attention: that kernel reads it; no other does
    readers = [k for k in rep.kernels if k.bytes_read >= y_bytes // 2 and k is not stats[0]]
    assert len(readers) == (1 if name == "cbam" else 0), str(rep)
    if name != "cbam":
        assert stats[0].bytes_written < y_bytes // 8, str(rep)

    cm = uniorch.compile(copy.deepcopy(model), target="interpret", fallback="error")
    for seed, nan in ((5, False), (6, True)):
        x = _inputs(shape, dtype, seed, nan)
        with torch.no_grad():
            _check(cm(x), model(x), tol)


@pytest.mark.parametrize("name", list(CASES))
def test_cpu_backend_matches_eager(name):
    make, shape = CASES[name]
    torch.manual_seed(4)
    model = make().eval()
    cm = uniorch.compile(copy.deepcopy(model), target="cpu", fallback="error")
    for seed, nan in ((9, False), (10, True)):
        x = _inputs(shape, torch.float32, seed, nan)
        with torch.no_grad():
            _check(cm(x), model(x), 1e-5)


def test_nan_in_one_chunk_reaches_the_max():
    """An activation NaN at chosen pixels (not from the input): the partial of the chunk holding
    it is NaN, and so is the max; torch's amax propagates it, where Triton's tl.max would not."""
    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 8, 3, padding=1)

        def forward(self, x, holes):
            y = self.conv(x)
            return torch.where(holes, float("nan"), y).amax((2, 3))

    torch.manual_seed(0)
    model = Masked().eval()
    holes = torch.zeros(2, 8, 16, 16, dtype=torch.bool)
    rep = explain_static(model, (torch.randn(2, 4, 16, 16), holes))
    assert any("tile statistics" in k.source for k in rep.kernels), str(rep)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    holes[0, 3, 15, 2] = True  # one channel of one image, in its last chunk
    holes[1, 6, 0, 0] = True
    x = torch.randn(2, 4, 16, 16)
    got, want = cm(x, holes), model(x, holes)
    assert want.isnan().sum() == 2
    _check(got, want, 1e-5)


def test_max_with_indices_keeps_one_kernel_reading_the_activation():
    """torch.max(x, dim) with its indices read: the index search reads the activation with the
    max, so no partials (they would add a kernel and save no read); both outputs as eager's, the
    first index of a tie and of a NaN."""
    class MaxIdx(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 32)

        def forward(self, x):
            v, i = torch.relu(self.fc(x)).max(1)
            return v, i

    torch.manual_seed(1)
    model = MaxIdx().eval()
    x = torch.randn(2, 64, 16)
    rep = explain_static(model, (x,))
    assert not any("tile statistics" in k.source for k in rep.kernels), str(rep)
    assert len(rep.kernels) == 2, str(rep)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    with torch.no_grad():
        model.fc.bias[:8] = -1e3  # ReLU zeros in every row: ties at 0 (exact, whatever the matmul's rounding)
    x[1, 9, :] = float("nan")
    (gv, gi), (wv, wi) = cm(x), model(x)
    _check(gv, wv, 1e-5)
    assert torch.equal(gi, wi)


def test_max_rides_with_a_sum_that_reads_the_activation():
    """CBAM at 14 x 14 in bf16: its average pool's partials (chunks of 4 pixels, 4-byte sums)
    would move as many bytes as the 16-bit activation, so a kernel reads the activation for the
    sum; the max is computed there too, not from partials that would only add bytes."""
    torch.manual_seed(2)
    model = ChannelAttention().eval().to(torch.bfloat16)
    x = torch.randn(2, 8, 14, 14, dtype=torch.bfloat16)
    rep = explain_static(model, (x,))
    assert not any("tile statistics" in k.source for k in rep.kernels), str(rep)
    both = [k for k in rep.kernels if k.kind == "reduction" and "_combine_maximumf" in k.source
            and any("sum" in op for op, _ in k.ops)]
    assert len(both) == 1, str(rep)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    x = _inputs(x.shape, torch.bfloat16, 3, False)
    with torch.no_grad():
        _check(cm(x), model(x), 1e-2)


def test_two_maxes_of_one_activation_with_other_chunks():
    """An amax over W beside an amin over H x W of the same activation: their chunks differ (16
    and 64 rows) and a kernel can take one chunk length only, so neither takes partials that
    would only add a kernel; each asks whether the other would, without asking back forever."""
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 32, 3, padding=1)

        def forward(self, x):
            y = torch.relu(self.conv(x))
            return y.amax(3), y.amin((2, 3))

    torch.manual_seed(5)
    model = Two().eval()
    x = torch.randn(2, 8, 16, 16)
    rep = explain_static(model, (x,))
    assert not rep.fallbacks and len(rep.kernels) == 3, str(rep)
    assert not any("tile statistics" in k.source for k in rep.kernels), str(rep)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    x = _inputs(x.shape, torch.float32, 8, True)
    with torch.no_grad():
        for got, want in zip(cm(x), model(x)):
            _check(got, want, 1e-5)


def test_a_max_beside_partials_of_another_chunk_length_reads_the_activation():
    """A sum over W already takes partials of 16 rows from the convolution; an amax over H x W
    (chunks of 64) then stays a reduction of its own: one kernel's partials have one length."""
    class SumAndMax(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 32, 3, padding=1)

        def forward(self, x):
            y = self.conv(x)
            return y.sum(3), y.amax((2, 3))

    torch.manual_seed(6)
    model = SumAndMax().eval()
    x = torch.randn(2, 8, 16, 16)
    rep = explain_static(model, (x,))
    assert not rep.fallbacks, str(rep)
    stats = [k for k in rep.kernels if "tile statistics" in k.source]
    assert len(stats) == 1 and "_maximumf_combine" not in stats[0].source, str(rep)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    with torch.no_grad():
        for got, want in zip(cm(x), model(x)):
            _check(got, want, 1e-5)


def test_amax_over_two_dims_is_one_reduction():
    """torch-mlir lowers amax over (H, W) as a max per dim; merged, one kernel reads x once."""
    f = lambda x: torch.amin(x * 2.0, (2, 3))  # noqa: E731
    x = torch.randn(4, 8, 12, 10)
    rep = explain_static(f, (x,))
    assert len(rep.kernels) == 1, str(rep)
    x[1, 2, 5, 7] = float("nan")
    _check(uniorch.compile(f, target="interpret")(x), f(x), 0)


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_kernels_compile_for_gpus(target, dtype):
    torch.manual_seed(0)
    model = PointNet().eval().to(dtype)
    art = uniorch.compile_aot(model, (torch.randn(2, 3, 256, dtype=dtype),), target=target)
    assert not art.fallbacks
    k = next(k for k in art.kernels if "tile statistics" in k.asm["triton"])
    assert ("cubin" if target.startswith("cuda") else "hsaco") in k.asm
    assert "_maximumf_combine" in k.asm["triton"]
