"""Two preprocessing rewrites that keep a tensor from being written twice
(passes/epilogue_views.py, passes/gather_casts.py), each checked by the kernels' bytes and against
eager on fresh random inputs.

- A bias add read through a linear layer's head-split view runs on the matmul's dims and rides on
  the matmul as its epilogue (GPT-NeoX-style partial rotary after an RMSNorm).
- An adaptive average pooling of a bf16 convolution reads the bf16 output and widens what it
  gathers: the convolution writes its bf16 result only, not a float32 copy beside it.
"""
from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch


def _seed():
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))


class NormLinearHeads(nn.Module):
    def __init__(self, dim=32, heads=2, part=8):
        super().__init__()
        self.h, self.part = heads, part
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.proj(self.norm(x)).view(b, t, self.h, -1)
        rot, rest = q[..., : self.part], q[..., self.part:]
        x1, x2 = rot[..., : self.part // 2], rot[..., self.part // 2:]
        rot = rot * cos + torch.cat((-x2, x1), -1) * sin
        return torch.cat((rot, rest), -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_bias_add_behind_a_head_view_is_the_matmul_epilogue(dtype):
    _seed()
    model = NormLinearHeads().to(dtype).eval()
    b, t = 2, 6

    def inputs():
        return (torch.randn(b, t, 32, dtype=dtype), torch.randn(t, 1, 8, dtype=dtype),
                torch.randn(t, 1, 8, dtype=dtype))

    cm = uniorch.compile(model, target="interpret")
    rep = cm.explain(*inputs())
    assert not rep.fallbacks, str(rep)
    mm = [k for k in rep.kernels if k.kind == "contraction"]
    assert len(mm) == 1, str(rep)
    # the bias is read by the matmul's kernel and by no other
    readers = [k for k in rep.kernels if any("proj" in where for _, where in k.ops)]
    assert readers == mm, str(rep)
    # every kernel after the matmul reads its (b, t, 32) output once at most: no second copy of it
    act = b * t * 32 * dtype.itemsize
    assert mm[0].bytes_written == act, str(rep)
    xs = inputs()
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cm(*xs), model(*xs), **tol)


def _compiled_bf16(model, shape):
    """(the bf16 model, its compiled form, explain's report for a fresh input), with no fallback."""
    _seed()
    model = model.to(torch.bfloat16).eval()
    cm = uniorch.compile(model, target="interpret")
    rep = cm.explain(torch.randn(shape, dtype=torch.bfloat16))
    assert not rep.fallbacks, str(rep)
    return model, cm, rep


def _matches_eager(cm, model, shape):
    x = torch.randn(shape, dtype=torch.bfloat16)
    for got, want in zip(cm(x), model(x)):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


class ConvAdaptivePool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        return F.adaptive_avg_pool2d(y, (5, 3)), F.max_pool2d(y, 2)


def test_gather_of_a_bf16_tensor_reads_16_bits():
    model, cm, rep = _compiled_bf16(ConvAdaptivePool(), (2, 4, 10, 10))
    conv = [k for k in rep.kernels if k.kind == "contraction"]
    assert len(conv) == 1, str(rep)
    assert conv[0].bytes_written == 2 * 6 * 10 * 10 * 2, str(rep)  # the bf16 output alone
    _matches_eager(cm, model, (2, 4, 10, 10))


class NormSiluBilinear(nn.Module):
    """GroupNorm and SiLU, then a bilinear upsampling and a second reader (a UNet decoder's
    output resized to the skip's size): torch computes the interpolation in float32, so the
    SiLU's bf16 result is widened, and that widening fuses into the SiLU's own generic."""

    def __init__(self):
        super().__init__()
        self.norm = nn.GroupNorm(2, 8)

    def forward(self, x):
        y = F.silu(self.norm(x))
        return F.interpolate(y, size=(12, 12), mode="bilinear", align_corners=False), y.amax((2, 3))


def test_gather_of_a_widening_split_off_a_pointwise_op_reads_16_bits():
    """narrow_stores splits the widening off the SiLU after gather_casts ran once: gather_casts
    runs again, and the SiLU's kernel stores bf16 only (it stored a float32 copy for the gather).
    GroupNorm's widened input, read through the reshapes to its groups, is widened by each reader
    (narrow_stores moves the widening below the reshapes), not copied to float32 by a kernel."""
    model, cm, rep = _compiled_bf16(NormSiluBilinear(), (1, 8, 8, 8))
    act, out = 8 * 8 * 8 * 2, 8 * 12 * 12 * 2
    # no float32 copy of the input (GroupNorm's) or of the SiLU's output (the interpolation's) is
    # written: the SiLU's bf16 output, the upsampled output, and statistics and index tables
    assert all(k.bytes_written <= act or k.bytes_written == out for k in rep.kernels), str(rep)
    assert sum(k.bytes_written for k in rep.kernels) <= act + out + 256, str(rep)
    _matches_eager(cm, model, (1, 8, 8, 8))
