"""A depthwise convolution computed in the B tiles of the 1x1 convolution that projects it
(passes/fuse_depthwise.py, codegen/contraction_window.py): MobileNetV2's inverted residual is two
kernels, the expansion and the projection, and the expanded depthwise output is never written.

Numerics against eager on fresh inputs; kernels and bytes from `uniorch.explain`. Where the
depthwise output has another reader (a returned value) or is read through a
window (a 3x3 convolution after it), it stays a kernel and the result must still be right; a
squeeze-excite mean from partial sums leaves it computed twice, never written."""
import pytest
import torch
from torch import nn

import uniorch
from uniorch.testing.gradients import weighted_grads

DTYPES = [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)]


def _bn(c, g):
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.running_mean.copy_(torch.rand(c, generator=g) - 0.5)
        bn.running_var.copy_(torch.rand(c, generator=g) + 0.5)
        bn.weight.copy_(torch.rand(c, generator=g) + 0.5)
        bn.bias.copy_(torch.rand(c, generator=g) - 0.5)
    return bn


def _cba(cin, cout, k, stride=1, groups=1, act=nn.ReLU6, g=None):
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), _bn(cout, g)]
    return nn.Sequential(*layers, act()) if act is not None else nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """torchvision's MobileNetV2 block (expand 1x1, depthwise kxk, project 1x1, residual at stride
    1); `se` adds MobileNetV3's squeeze-excite on the depthwise output, `tail` a 3x3 convolution
    where the projection was, `keep` returns the depthwise output too."""

    def __init__(self, c, t=6, k=3, stride=1, act=nn.ReLU6, se=False, tail=False, keep=False):
        super().__init__()
        g = torch.Generator().manual_seed(c * 10 + k)
        h = c * t
        self.expand = _cba(c, h, 1, act=act, g=g)
        self.dw = _cba(h, h, k, stride, groups=h, act=act, g=g)
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(h, h // 4, 1), nn.ReLU(),
                                nn.Conv2d(h // 4, h, 1), nn.Hardsigmoid()) if se else None
        self.project = _cba(h, c, 3 if tail else 1, act=None, g=g)
        self.residual, self.keep = stride == 1, keep

    def forward(self, x):
        d = self.dw(self.expand(x))
        y = self.project(d * self.se(d) if self.se is not None else d)
        y = x + y if self.residual else y
        return (y, d) if self.keep else y


def _err(got, want):
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


def _check(model, shape, dtype, tol):
    model = model.eval().to(dtype)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    rep = cm.explain(torch.randn(shape).to(dtype))
    assert not rep.fallbacks, rep.fallbacks
    fresh = torch.randn(shape, generator=torch.Generator().manual_seed(9)).to(dtype)
    with torch.no_grad():
        got, want = cm(fresh), model(fresh)
    for g, w in zip(*(t if isinstance(t, tuple) else (t,) for t in (got, want))):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert _err(g, w) <= tol, _err(g, w)
    return rep


def _expanded_bytes(shape, t, stride, dtype):
    b, c, hgt, wid = shape
    out = lambda n: (n + 2 - 3) // stride + 1  # noqa: E731 - a 3x3 window, padding 1
    return b * c * t * out(hgt) * out(wid) * torch.empty(0, dtype=dtype).element_size()


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("stride,shape", [(1, (2, 16, 10, 10)), (2, (2, 8, 9, 11))])
def test_mobilenetv2_block_is_two_kernels(stride, shape, dtype, tol):
    rep = _check(InvertedResidual(shape[1], stride=stride), shape, dtype, tol)
    assert [k.kind for k in rep.kernels] == ["contraction"] * 2, rep
    # the projection writes only the block's output: the depthwise activation never goes to memory
    out = rep.kernels[1].bytes_written
    assert out < _expanded_bytes(shape, 6, stride, dtype) / 3, (out, rep)


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_efficientnet_5x5_silu(dtype, tol):
    rep = _check(InvertedResidual(8, t=4, k=5, act=nn.SiLU), (2, 8, 7, 9), dtype, tol)
    assert [k.kind for k in rep.kernels] == ["contraction"] * 2, rep


@pytest.mark.parametrize("case", ["tail", "keep"])
def test_depthwise_with_other_readers_stays_a_kernel(case):
    rep = _check(InvertedResidual(8, t=4, **{case: True}), (2, 8, 6, 6), torch.float32, 1e-5)
    assert len(rep.kernels) >= 3, rep


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_squeeze_excite_reads_the_depthwise_twice(dtype, tol):
    """MobileNetV3's squeeze-excite: the mean comes from sums of the depthwise kernel's epilogue
    (passes/tile_stats.py), which then writes only those; a clone of the depthwise convolution
    feeds the projection. No kernel but the expansion writes an expanded activation."""
    shape = (2, 8, 8, 8)
    rep = _check(InvertedResidual(8, t=4, se=True, act=nn.Hardswish), shape, dtype, tol)
    expanded = _expanded_bytes(shape, 4, 1, dtype)
    writers = [k.name for k in rep.kernels if k.bytes_written >= expanded]
    assert writers == [rep.kernels[0].name], rep


def test_mobilenetv2_gradients():
    torch.manual_seed(3)
    grads = weighted_grads(lambda: InvertedResidual(8, t=4), torch.randn(2, 8, 6, 7))
    assert _err(*grads[0]) <= 1e-4
    for got, want in grads[1:]:
        assert _err(got, want) <= 1e-4


@pytest.mark.parametrize("target,binary", [("cuda:sm_90", "cubin"), ("rocm:gfx942", "hsaco")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_mobilenetv2_block_cross_compiles(target, binary, dtype):
    model = InvertedResidual(24).eval().to(dtype)
    art = uniorch.compile_aot(model, (torch.randn(4, 24, 28, 28).to(dtype),), target, fallback="error")
    assert not art.fallbacks, art.fallbacks
    assert [k.kind for k in art.kernels] == ["contraction"] * 2, [k.kind for k in art.kernels]
    assert all(k.asm[binary][:4] == b"\x7fELF" for k in art.kernels)
    # the B tile summed tap by tap stays in registers: 16-deep K tiles (64 deep spilled in bf16 on
    # sm_90, `ptxas -v`: 428 B a thread with Triton 3.6's ptxas, 2.5 KB with 3.9's)
    assert art.kernels[1].source.constexprs["BLOCK_K"] == 16, art.kernels[1].source.constexprs
