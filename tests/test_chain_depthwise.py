"""A depthwise convolution computed inside the chain that reads it: a ConvNeXt block (7x7 depthwise,
channels-last LayerNorm, 4x MLP, layer scale, residual) is one kernel that reads the block's input
and weights and writes its output, where it was a depthwise kernel writing an activation for the
chain to read back (codegen/chain_lead.py, depthwise leads; passes/fuse_factors.py lets the
LayerNorm into the chain's prologue past a plain matmul's 256 columns).

Numerics against eager on fresh inputs; kernels and bytes from `uniorch.explain`. Where the
depthwise convolution cannot lead (a channel multiplier, more channels than a chain holds, its
output also returned) the result must still be right."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch
from uniorch.testing import zoo
from uniorch.testing.gradients import weighted_grads

DTYPES = [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)]


class ConvNeXtBlock(nn.Module):
    def __init__(self, c, stride=1, mult=1, keep_dw=False):
        super().__init__()
        self.dw = nn.Conv2d(c, c * mult, 7, stride=stride, padding=3, groups=c)
        self.norm = nn.LayerNorm(c * mult, eps=1e-6)
        self.pw1 = nn.Linear(c * mult, 4 * c)
        self.pw2 = nn.Linear(4 * c, c)
        g = torch.Generator().manual_seed(c)
        self.gamma = nn.Parameter(torch.rand(c, generator=g) + 0.5)
        self.residual = stride == 1 and mult == 1
        self.keep_dw = keep_dw

    def forward(self, x):
        d = self.dw(x)
        h = self.gamma * self.pw2(F.gelu(self.pw1(self.norm(d.permute(0, 2, 3, 1)))))
        h = h.permute(0, 3, 1, 2)
        y = x + h if self.residual else h
        return (y, d) if self.keep_dw else y


def _err(got, want):
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


def _compiled_matches(model, shape, dtype, tol):
    cm = uniorch.compile(model, target="interpret", fallback="error")
    fresh = torch.randn(shape, generator=torch.Generator().manual_seed(11)).to(dtype)
    with torch.no_grad():
        got, want = cm(fresh), model(fresh)
    for g, w in zip(*(t if isinstance(t, tuple) else (t,) for t in (got, want))):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert _err(g, w) <= tol, _err(g, w)


@pytest.mark.parametrize("dtype,tol", DTYPES)
@pytest.mark.parametrize("c,hw", [(16, (9, 7)), (96, (6, 6))])
def test_convnext_block_is_one_kernel(c, hw, dtype, tol):
    model = ConvNeXtBlock(c).eval().to(dtype)
    shape = (2, c) + hw
    rep = uniorch.explain(model, torch.randn(shape).to(dtype), target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    assert [k.kind for k in rep.kernels] == ["chain"], rep
    # input and weights read once, output written once: no depthwise activation in memory
    assert rep.bytes_moved <= 1.02 * rep.bytes_minimum, (rep.bytes_moved, rep.bytes_minimum)
    _compiled_matches(model, shape, dtype, tol)


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_strided_depthwise_leads(dtype, tol):
    """Stride 2: the chain's rows are the convolution's output pixels."""
    model = ConvNeXtBlock(8, stride=2).eval().to(dtype)
    shape = (3, 8, 9, 10)
    rep = uniorch.explain(model, torch.randn(shape).to(dtype), target="interpret")
    assert [k.kind for k in rep.kernels] == ["chain"], rep
    _compiled_matches(model, shape, dtype, tol)


@pytest.mark.parametrize("case", ["multiplier", "output"])
def test_depthwise_that_cannot_lead_stays_correct(case):
    """A channel multiplier (two outputs per group: not one channel per column) and a depthwise
    output also returned: two kernels or more, same numbers."""
    model, shape = {
        "multiplier": (ConvNeXtBlock(6, mult=2), (2, 6, 5, 5)),
        "output": (ConvNeXtBlock(8, keep_dw=True), (2, 8, 5, 6)),
    }[case]
    model = model.eval()
    rep = uniorch.explain(model, torch.randn(shape), target="interpret")
    assert not rep.fallbacks and len(rep.kernels) >= 2, rep
    _compiled_matches(model, shape, torch.float32, 1e-5)


def test_more_channels_than_a_chain_holds_keep_their_kernel():
    """272 channels: past the 256 a chain holds whole, so the depthwise convolution is a kernel of
    its own (the path every depthwise convolution took before, checked against eager elsewhere)."""
    from uniorch.api import explain_static

    rep = explain_static(ConvNeXtBlock(272).eval(), (torch.randn(1, 272, 3, 3),), target="interpret")
    assert not rep.fallbacks and "chain" not in [k.kind for k in rep.kernels], rep
    first = rep.kernels[0]
    assert first.kind == "contraction" and [op for op, _ in first.ops][0] == "aten.convolution.default", rep


@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_zoo_convnext_with_pixel_shuffle_under_2x(dtype, tol):
    """tests/models/conv_layernorm_misc.py (reflect padding by F.pad, then a 1x1 convolution and
    pixel_shuffle): the depthwise leads through its reflect gather; was 3 kernels and 2.78x."""
    model, args, kwargs = zoo.load("conv_layernorm_misc")
    model = zoo.model_to(model, "cpu", dtype)
    args, kwargs = zoo.to((args, kwargs), "cpu", dtype)
    rep = uniorch.explain(model, *args, target="interpret")
    assert [k.kind for k in rep.kernels] == ["chain", "contraction"], rep
    assert rep.bytes_moved <= 1.75 * rep.bytes_minimum, (rep.bytes_moved, rep.bytes_minimum)
    _compiled_matches(model, args[0].shape, dtype, tol)


def test_hf_convnext_layers_are_chains():
    """transformers' ConvNext in its default settings: each ConvNextLayer is one chain kernel."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.ConvNextConfig(num_stages=2, hidden_sizes=[16, 32], depths=[2, 1], image_size=32,
                                      num_labels=5)
    model = transformers.ConvNextForImageClassification(cfg).eval()
    cm = uniorch.compile(model, target="interpret", fallback="error")
    rep = cm.explain(torch.randn(2, 3, 32, 32))
    assert not rep.fallbacks, rep.fallbacks
    assert [k.kind for k in rep.kernels].count("chain") == 3, rep
    fresh = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got, want = cm(fresh).logits, model(fresh).logits
    assert _err(got, want) <= 1e-4


def test_convnext_block_gradients():
    """Training keeps the depthwise output for the backward, so it is written; the compiled step's
    gradients are eager's."""
    torch.manual_seed(2)
    grads = weighted_grads(lambda: ConvNeXtBlock(8), torch.randn(2, 8, 6, 5))
    assert _err(*grads[0]) <= 1e-5
    for got, want in grads[1:]:
        assert _err(got, want) <= 1e-4


@pytest.mark.parametrize("target,binary", [("cuda:sm_90", "cubin"), ("rocm:gfx942", "hsaco")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_convnext_block_cross_compiles(target, binary, dtype):
    model = ConvNeXtBlock(96).eval().to(dtype)
    art = uniorch.compile_aot(model, (torch.randn(2, 96, 14, 14).to(dtype),), target, fallback="error")
    assert not art.fallbacks, art.fallbacks
    assert [k.kind for k in art.kernels] == ["chain"], [k.kind for k in art.kernels]
    assert art.kernels[0].asm[binary][:4] == b"\x7fELF"
