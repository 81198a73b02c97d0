"""Gathers before a convolution or matmul run in its factor tiles (passes/fuse_factors.py,
codegen/contraction_gather.py): nearest and bilinear upsampling before a UNet decoder's conv, a
reflect or replicate pad before a ConvNeXt depthwise conv, an upsampled piece of a skip
concatenation. The upsampled or padded tensor is never written: the conv loads the source where its
tile needs it. Numerics against eager on fresh inputs, fp32 and bf16; kernel counts and bytes from
`explain` against the byte count of the tensors involved; the kernels compile for sm_90 and gfx942.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch
from uniorch.api import explain_static


class UpConv(nn.Module):
    """Decoder step: upsample, then a 3x3 conv (optionally on the concatenation with a skip)."""

    def __init__(self, mode: str, skip: bool):
        super().__init__()
        self.mode, self.skip = mode, skip
        self.conv = nn.Conv2d(16 if skip else 8, 8, 3, padding=1)

    def forward(self, x, s):
        kw = {} if self.mode == "nearest" else {"align_corners": False}
        u = F.interpolate(x, scale_factor=2, mode=self.mode, **kw)
        return self.conv(torch.cat([u, s], 1) if self.skip else u)


class PadConv(nn.Module):
    """A depthwise conv on an explicitly padded input (ConvNeXt/vocoder style)."""

    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode
        self.conv = nn.Conv2d(8, 8, 5, groups=8)

    def forward(self, x, s):
        return self.conv(F.pad(x, (2, 2, 2, 2), mode=self.mode))


CASES = [
    ("nearest", lambda: UpConv("nearest", False)),
    ("nearest-cat", lambda: UpConv("nearest", True)),
    ("bilinear", lambda: UpConv("bilinear", False)),
    ("bilinear-cat", lambda: UpConv("bilinear", True)),
    ("replicate", lambda: PadConv("replicate")),
]


def _inputs(dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 8, 6, 7, generator=g).to(dtype)
    s = torch.randn(2, 8, 12, 14, generator=g).to(dtype)
    return x, s


def _err(got, want) -> float:
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


@pytest.mark.parametrize("name,make", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 1e-2)], ids=["fp32", "bf16"])
def test_gather_before_conv_is_one_kernel_and_matches_eager(name, make, dtype, tol):
    torch.manual_seed(1)
    model = make().eval().to(dtype)
    x, s = _inputs(dtype)
    rep = explain_static(model, (x, s))
    assert not rep.fallbacks, rep.fallbacks
    assert [k.kind for k in rep.kernels] == ["contraction"], str(rep)
    # no upsampled or padded copy: the kernel reads each tensor it touches at most once
    size = dtype.itemsize
    read_floor = (x.numel() + s.numel() + sum(p.numel() for p in model.parameters())) * size
    assert rep.kernels[0].bytes_read <= read_floor, (rep.kernels[0].bytes_read, read_floor)
    cm = uniorch.compile(model, target="interpret")
    x2, s2 = _inputs(dtype, seed=7)
    with torch.no_grad():
        got, want = cm(x2, s2), model(x2, s2)
    assert _err(got, want) <= tol


def test_reflect_pad_reads_the_unpadded_input():
    """torch lowers a reflect pad as two gathers (one per dim): the second runs in the conv's tile,
    the first stays a kernel of its own (a gather of a computed value needs that value in memory)."""
    torch.manual_seed(2)
    model = PadConv("reflect").eval()
    x, s = _inputs()
    rep = explain_static(model, (x, s))
    assert not rep.fallbacks
    conv = [k for k in rep.kernels if k.kind == "contraction"]
    assert len(conv) == 1 and len(rep.kernels) <= 2, str(rep)
    padded = 2 * 8 * (6 + 4) * (7 + 4) * 4
    assert conv[0].bytes_read < padded, str(rep)
    cm = uniorch.compile(model, target="interpret")
    x2, s2 = _inputs(seed=3)
    with torch.no_grad():
        assert _err(cm(x2, s2), model(x2, s2)) <= 1e-4


class ComputedSource(nn.Module):
    """The upsampled tensor is computed just before (a ReLU): the gather must read it from memory,
    so the ReLU cannot join the conv's kernel through the gather."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x, s):
        return self.conv(F.interpolate(torch.relu(x) * 2.0, scale_factor=2, mode="nearest"))


def test_gather_of_a_computed_tensor_reads_it_from_memory():
    torch.manual_seed(3)
    model = ComputedSource().eval()
    x, s = _inputs()
    rep = explain_static(model, (x, s))
    assert not rep.fallbacks
    assert sorted(k.kind for k in rep.kernels) == ["contraction", "pointwise"], str(rep)
    cm = uniorch.compile(model, target="interpret")
    x2, s2 = _inputs(seed=4)
    with torch.no_grad():
        assert _err(cm(x2, s2), model(x2, s2)) <= 1e-4


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
def test_gather_prologue_compiles_for_gpus(target):
    torch.manual_seed(4)
    model = UpConv("bilinear", True).eval()
    art = uniorch.compile_aot(model, _inputs(), target=target)
    assert not art.fallbacks and len(art.kernels) == 1
    assert ("cubin" if target.startswith("cuda") else "hsaco") in art.kernels[0].asm
    assert "tl.load(in" in art.kernels[0].asm["triton"] and "_gather" in art.kernels[0].asm["triton"]


@pytest.mark.parametrize("cin,cout,k,stride,padding,out_pad", [(8, 4, 2, 2, 0, 0), (8, 16, 3, 2, 1, 1), (6, 6, 4, 1, 1, 0)])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 1e-2)], ids=["fp32", "bf16"])
def test_transposed_conv_reads_its_filters_flipped_in_place(cin, cout, k, stride, padding, out_pad, dtype, tol):
    """A transposed convolution is a convolution of the zero-stuffed input with the filters
    flipped and transposed: a pure gather of the weight, loaded in the conv's filter tile at the
    flipped addresses (no flipped copy kernel), whatever the number of tiles reading it."""
    torch.manual_seed(cin + k)
    model = nn.ConvTranspose2d(cin, cout, k, stride=stride, padding=padding, output_padding=out_pad).eval().to(dtype)
    x = torch.randn(2, cin, 5, 6).to(dtype)
    rep = explain_static(model, (x,))
    assert not rep.fallbacks and [kk.kind for kk in rep.kernels] == ["contraction"], str(rep)
    assert rep.bytes_moved <= rep.bytes_minimum, str(rep)
    cm = uniorch.compile(model, target="interpret")
    x2 = torch.randn(2, cin, 5, 6).to(dtype)
    # judged against the float64 convolution of the same values: eager's own bf16 transposed
    # convolution was 1.4% off it on an AVX2-only machine, beyond the tolerance itself
    exact = copy.deepcopy(model).double()
    with torch.no_grad():
        assert _err(cm(x2), exact(x2.double())) <= tol


def test_a_gather_from_a_broadcast_of_a_computed_tensor_reads_the_tensor():
    """`gather(c[:, None].expand(B, S, N), 2, idx)` (NeRF's inverse-CDF sampling) with c computed:
    passes/compose_gathers.py reads c at the gathered positions; the B x S x N broadcast, which
    only the gather reads, is never written (it was: 2 MB for a 16 KB source at these sizes)."""
    def fn(w, idx):
        c = torch.cumsum(torch.softmax(w, -1), -1)
        b, s, n = w.shape[0], idx.shape[1], w.shape[1]
        return torch.gather(c.unsqueeze(1).expand(b, s, n), 2, idx).sum(-1)

    torch.manual_seed(5)
    w, idx = torch.randn(16, 64), torch.randint(0, 64, (16, 128, 2))
    rep = uniorch.explain(fn, w, idx, target="interpret")
    assert not rep.fallbacks, str(rep)
    broadcast = 16 * 128 * 64 * 4
    assert all(k.bytes_written < broadcast // 8 for k in rep.kernels), str(rep)
    cm = uniorch.compile(fn, target="interpret")
    for seed in (6, 7):
        torch.manual_seed(seed)
        w, idx = torch.randn(16, 64), torch.randint(0, 64, (16, 128, 2))
        torch.testing.assert_close(cm(w, idx), fn(w, idx))
