"""One kernel per convolution: the implicit-GEMM contraction template with the input's zero padding
as masked loads, the bias in the accumulator, BatchNorm(eval) / activation / residual add as its
epilogue and pointwise producers of its input as a prologue. Numerics against eager on fresh
inputs; kernel kinds, counts and bytes from `uniorch.explain`."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch


def _check(model, x, kernels, kinds=("contraction",), rtol=1e-4, max_ratio=None):
    model = model.eval()
    rep = uniorch.explain(model, x, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    assert [k.kind for k in rep.kernels] == list(kinds) * kernels, [k.kind for k in rep.kernels]
    if max_ratio is not None:
        assert rep.bytes_moved <= max_ratio * rep.bytes_minimum, (rep.bytes_moved, rep.bytes_minimum)
    cm = uniorch.compile(model, target="interpret")
    fresh = torch.randn_like(x)
    got, want = cm(fresh), model(fresh)
    scale = want.float().abs().max().clamp_min(1e-6)
    err = ((got.float() - want.float()).abs().max() / scale).item()
    assert err <= rtol, err


def _bn(c):
    bn = nn.BatchNorm2d(c)
    bn.running_mean.uniform_(-0.5, 0.5)
    bn.running_var.uniform_(0.5, 2.0)
    nn.init.uniform_(bn.weight, 0.5, 1.5)
    nn.init.uniform_(bn.bias, -0.2, 0.2)
    return bn


@pytest.mark.parametrize("cin,cout,k,stride,padding,dilation,groups,bias", [
    (3, 8, 3, 1, 1, 1, 1, True),     # plain, padded
    (4, 16, 3, 2, 1, 1, 1, False),   # strided, no bias
    (6, 8, 3, 1, 2, 2, 2, True),     # dilated, grouped
    (8, 8, 3, 2, 1, 1, 8, False),    # depthwise, strided
    (5, 7, (1, 3), 1, (0, 2), 1, 1, True),  # odd sizes, asymmetric kernel and padding
])
def test_conv2d_one_kernel(cin, cout, k, stride, padding, dilation, groups, bias):
    torch.manual_seed(0)
    conv = nn.Conv2d(cin, cout, k, stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias)
    _check(conv, torch.randn(2, cin, 9, 10), kernels=1, max_ratio=1.05)


@pytest.mark.parametrize("act", [nn.ReLU(), nn.ReLU6(), nn.Hardtanh(-0.5, 0.5), nn.SiLU(), nn.GELU(), nn.Hardswish()])
def test_conv_bn_activation_one_kernel(act):
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), _bn(8), act)
    _check(model, torch.randn(2, 4, 8, 8), kernels=1, max_ratio=1.05)


class BasicBlock(nn.Module):
    """ResNet's basic block: conv-bn-relu, conv-bn, + identity, relu."""

    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), _bn(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), _bn(c)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(h)) + x)


def test_resnet_basic_block_one_kernel_per_conv():
    torch.manual_seed(2)
    # beyond the minimum: the intermediate written and read once, x read again by the residual add
    _check(BasicBlock(8), torch.randn(2, 8, 8, 8), kernels=2, max_ratio=2.0)


def test_bn_relu_before_padded_conv_is_a_prologue():
    # DenseNet order: the normalised input never goes to memory, its padding is still zero
    torch.manual_seed(3)
    model = nn.Sequential(_bn(6), nn.Sigmoid(), nn.Conv2d(6, 8, 3, padding=2, stride=2, dilation=2))
    _check(model, torch.randn(2, 6, 9, 9), kernels=1, max_ratio=1.05)


def test_conv_bn_relu_bf16():
    torch.manual_seed(4)
    model = nn.Sequential(nn.Conv2d(4, 16, 3, padding=1), _bn(16), nn.ReLU()).to(torch.bfloat16)
    _check(model, torch.randn(2, 4, 8, 8, dtype=torch.bfloat16), kernels=1, rtol=2e-2)
