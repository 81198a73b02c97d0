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


class DenseLayers(nn.Module):
    """DenseNet: each layer's BN-ReLU-conv reads the concatenation of every earlier output."""

    def __init__(self, c, growth, n):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(_bn(c + i * growth), nn.ReLU(), nn.Conv2d(c + i * growth, growth, 3, padding=1))
            for i in range(n))

    def forward(self, x):
        feats = [x]
        for layer in self.layers:
            feats.append(layer(torch.cat(feats, 1)))
        return torch.cat(feats, 1)


def test_densenet_concat_is_read_by_the_conv():
    # the concatenations feeding convs become masked loads of their pieces (BN + ReLU computed on
    # them in the input tiles): one kernel per conv and only the block's output is copied
    torch.manual_seed(5)
    rep = uniorch.explain(DenseLayers(4, 3, 3).eval(), torch.randn(2, 4, 6, 7), target="interpret")
    assert [k.kind for k in rep.kernels].count("contraction") == 3, str(rep)
    assert [k.kind for k in rep.kernels].count("copy") == 1, str(rep)
    _check(DenseLayers(4, 3, 3), torch.randn(2, 4, 6, 7), kernels=1, kinds=("contraction",) * 3 + ("copy",))


class SkipConcat(nn.Module):
    """A UNet decoder step: upsample, concatenate the skip connection, conv."""

    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(3, 5, 3, stride=2, padding=1)
        self.up = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        d = F.silu(self.down(x))
        return self.up(torch.cat([F.interpolate(d, scale_factor=2.0, mode="nearest"), x], 1))


def test_unet_skip_concat_is_read_by_the_conv():
    # no copy of the concatenation, and none of the upsampling: the conv gathers from the
    # half-size tensor where its tile needs it (codegen/contraction_gather.py)
    torch.manual_seed(6)
    _check(SkipConcat(), torch.randn(2, 3, 8, 8), kernels=1, kinds=("contraction", "contraction"))


class NormReadTwice(nn.Module):
    """A UNet encoder step: the block output silu(GroupNorm(conv(x))) is read by the downsampling
    convolution and, through the skip concatenation, by the decoder's convolution."""

    def __init__(self, down="conv"):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(4, 8)
        self.down = nn.Conv2d(8, 8, 3, stride=2, padding=1) if down == "conv" else nn.MaxPool2d(2)
        self.dec = nn.Conv2d(16, 4, 3, padding=1)

    def forward(self, x):
        e = F.silu(self.norm(self.conv(x)))
        d = F.silu(self.down(e))
        return self.dec(torch.cat([F.interpolate(d, scale_factor=2.0, mode="nearest"), e], 1))


@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("down", ["conv", "pool"])
def test_norm_read_by_two_convs_is_in_both_prologues(dtype, rtol, down):
    # each convolution (or the max-pool) normalises the first one's output where it reads it: no
    # pointwise kernel writes e, which is as large as the convolution output they read instead
    torch.manual_seed(7)
    model = NormReadTwice(down).eval().to(dtype)
    x = torch.randn(2, 3, 8, 8, dtype=dtype)
    rep = uniorch.explain(model, x, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    assert "pointwise" not in [k.kind for k in rep.kernels], str(rep)
    conv_out = 2 * 8 * 8 * 8 * x.element_size()
    assert not [k for k in rep.kernels if k.bytes_written >= conv_out and k.kind != "contraction"], str(rep)
    assert sum(k.bytes_written >= conv_out for k in rep.kernels) == 1, str(rep)  # the first conv only
    cm = uniorch.compile(model, target="interpret")
    for seed in (1, 2):
        fresh = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(seed)).to(dtype)
        got, want = cm(fresh), model(fresh)
        err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
        assert err <= rtol, err


class CatLinear(nn.Module):
    """A recurrent cell's gates read cat(x, h) (K split across pieces) and a matmul over rows
    stacked from three tensors (M split), one of them bf16-odd-sized."""

    def __init__(self):
        super().__init__()
        self.gates = nn.Linear(7 + 5, 9)

    def forward(self, x, h, r):
        g = self.gates(torch.cat([x, h], -1))
        return torch.cat([g, r, g * 2], 0) @ self.gates.weight[:, :9].t()


@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)])
def test_matmul_over_concat_reads_its_pieces(dtype, rtol):
    torch.manual_seed(7)
    model = CatLinear().to(dtype).eval()
    args = lambda: (torch.randn(6, 7, dtype=dtype), torch.randn(6, 5, dtype=dtype),  # noqa: E731
                    torch.randn(3, 9, dtype=dtype))
    rep = uniorch.explain(model, *args(), target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    assert "copy" not in [k.kind for k in rep.kernels], str(rep)
    cm = uniorch.compile(model, target="interpret")
    fresh = args()
    got, want = cm(*fresh), model(*fresh)
    err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
    assert err <= rtol, err


class ConvPositions(nn.Module):
    """Whisper's encoder stem: conv, GELU, stride-2 conv, GELU, to (batch, time, channels), plus an
    embedding of the positions (a gather the contraction epilogue does not take: its own kernel)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv1d(8, 16, 3, padding=1), nn.Conv1d(16, 16, 3, stride=2, padding=1)
        self.pos = nn.Embedding(16, 16)

    def forward(self, x):
        h = F.gelu(self.c2(F.gelu(self.c1(x)))).permute(0, 2, 1)
        return h + self.pos(torch.arange(h.shape[1]))


def test_conv_epilogue_with_a_position_embedding():
    torch.manual_seed(8)
    model = ConvPositions().eval()
    x = torch.randn(2, 8, 32)
    rep = uniorch.explain(model, x, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    cm = uniorch.compile(model, target="interpret")
    fresh = torch.randn_like(x)
    torch.testing.assert_close(cm(fresh), model(fresh), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("conv,shape,fused", [
    (lambda: nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1), (2, 4, 5, 6), True),
    (lambda: nn.ConvTranspose2d(3, 5, 3, stride=2, dilation=2), (2, 3, 4, 4), True),
    (lambda: nn.ConvTranspose1d(4, 2, 4, stride=3, padding=2), (2, 4, 7), True),
    # grouped: the stuffed input reaches the convolution through a reshape to [N, G, C/G, ...], and
    # stays a copy kernel (correct, not yet read in place)
    (lambda: nn.ConvTranspose2d(6, 4, (2, 3), stride=(2, 3), groups=2, bias=False), (1, 6, 4, 3), False),
], ids=["stride2-outpad", "dilated", "1d-stride3", "grouped-rect"])
@pytest.mark.parametrize("dtype,rtol", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)], ids=["fp32", "bf16"])
def test_transposed_conv_reads_its_input_not_a_stuffed_copy(conv, shape, fused, dtype, rtol):
    """A transposed convolution is a convolution over its input stuffed with zeros (insert_slice
    with strides into a zero fill): the kernel loads the input on the stride's lattice (masked
    loads), so neither the zero fill nor the stuffed copy is a kernel. What remains beside the
    convolution is the flipped weight's gather."""
    torch.manual_seed(3)
    model = nn.Sequential(conv(), nn.ReLU()).to(dtype).eval()
    x = torch.randn(shape, dtype=dtype)
    rep = uniorch.explain(model, x, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    kinds = [k.kind for k in rep.kernels]
    assert kinds.count("contraction") == 1, kinds
    if fused:
        assert "copy" not in kinds and len(kinds) <= 2, kinds
    cm = uniorch.compile(model, target="interpret")
    fresh = torch.randn_like(x)
    got, want = cm(fresh), model(fresh)
    err = ((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-6)).item()
    assert err <= rtol, err
