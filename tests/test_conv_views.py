"""A convolution's output read through a view that splits its channels, and grouped convolutions in
16 bits: each stays one kernel that stores its result once.

- pixel_shuffle (sub-pixel upsampling) and ShuffleNet's channel shuffle split the channels and
  permute the pieces. The split moves onto the convolution (passes/sink_collapse.py
  `_split_channels`), so the permute is a reordering of its own loops and its epilogue stores
  into the permuted layout: no copy kernel writing the activation again.
- A grouped convolution computes in (group, channel) dims. In bf16 its bias widens to f32 for the
  accumulator, and its BatchNorm reads the widened result through a view: both are now part of the
  convolution's kernel (passes/fuse.py, the accumulator's init and `_feeds_one_epilogue`).

Numerics against eager on fresh inputs; kernels and bytes from `uniorch.explain`."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch
from uniorch.testing.gradients import weighted_grads

DTYPES = [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)]


def _bn(c, seed):
    g = torch.Generator().manual_seed(seed)
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.running_mean.copy_(torch.rand(c, generator=g) - 0.5)
        bn.running_var.copy_(torch.rand(c, generator=g) + 0.5)
        bn.weight.copy_(torch.rand(c, generator=g) + 0.5)
        bn.bias.copy_(torch.rand(c, generator=g) - 0.5)
    return bn


class PixelShuffleHead(nn.Module):
    def __init__(self, cin, r, act):
        super().__init__()
        self.conv = nn.Conv2d(cin, 3 * r * r, 3, padding=1)
        self.r, self.act = r, act

    def forward(self, x):
        y = self.conv(x)
        return F.pixel_shuffle(torch.relu(y) if self.act else y, self.r)


class ShuffleUnit(nn.Module):
    """conv (grouped or not) + BatchNorm + ReLU, then ShuffleNet's channel shuffle."""

    def __init__(self, groups, shuffle):
        super().__init__()
        self.conv = nn.Conv2d(6, 12, 3, padding=1, groups=groups)
        self.bn = _bn(12, seed=groups)
        self.shuffle = shuffle

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        if self.shuffle:
            b, c, h, w = y.shape
            y = y.view(b, 3, c // 3, h, w).transpose(1, 2).reshape(b, c, h, w)
        return y


def _check(model, shape, dtype, tol, kernels=1):
    model = model.eval().to(dtype)
    x = torch.randn(shape).to(dtype)
    rep = uniorch.explain(model, x, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    assert [k.kind for k in rep.kernels] == ["contraction"] * kernels, rep
    # every input (weights included) read once, the output written once
    assert rep.bytes_moved <= 1.02 * rep.bytes_minimum, (rep.bytes_moved, rep.bytes_minimum)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    fresh = torch.randn(shape, generator=torch.Generator().manual_seed(7)).to(dtype)
    with torch.no_grad():
        got, want = cm(fresh), model(fresh)
    assert got.shape == want.shape and got.dtype == want.dtype
    err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
    assert err <= tol, err
    return cm


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("r,act", [(2, True), (3, False)])
def test_pixel_shuffle_is_the_convolutions_store(r, act, dtype, tol):
    torch.manual_seed(r)
    _check(PixelShuffleHead(4, r, act), (2, 4, 5, 7), dtype, tol)


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("groups", [1, 3])
@pytest.mark.parametrize("shuffle", [False, True])
def test_conv_bn_relu_shuffle_one_kernel(groups, shuffle, dtype, tol):
    torch.manual_seed(10 + groups)
    _check(ShuffleUnit(groups, shuffle), (2, 6, 7, 5), dtype, tol)


@pytest.mark.parametrize("groups", [2, 3])
def test_grouped_conv_bf16_bias_in_the_accumulator(groups):
    """The bias, widened to f32, starts the accumulator: no f32 broadcast of it in memory."""
    torch.manual_seed(groups)
    _check(nn.Conv2d(6, 12, 3, padding=1, groups=groups), (2, 6, 7, 5), torch.bfloat16, 2e-2)


def test_pixel_shuffle_gradients():
    torch.manual_seed(4)
    grads = weighted_grads(lambda: PixelShuffleHead(4, 2, True), torch.randn(2, 4, 5, 7))

    def rel(a, b):
        return ((a - b).abs().max() / b.abs().max()).item()

    assert rel(*grads[0]) <= 1e-5
    for got, want in grads[1:]:
        assert rel(got, want) <= 1e-5


@pytest.mark.parametrize("target,binary", [("cuda:sm_90", "cubin"), ("rocm:gfx942", "hsaco")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_shuffles_cross_compile(target, binary, dtype):
    model = ShuffleUnit(3, True).eval().to(dtype)
    art = uniorch.compile_aot(model, (torch.randn(2, 6, 7, 5).to(dtype),), target, fallback="error")
    assert not art.fallbacks, art.fallbacks
    assert [k.kind for k in art.kernels] == ["contraction"], [k.kind for k in art.kernels]
    assert art.kernels[0].asm[binary][:4] == b"\x7fELF"
