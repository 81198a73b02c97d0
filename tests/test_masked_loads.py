"""Constant pads and concatenations read by reduction and pointwise kernels (pooling windows,
F.pad before arithmetic, rotary embeddings' rotate_half) and by matmul epilogues (ViT's class
token and patches for the residual) are masked loads of their sources in the
reading kernel (passes/fuse.py join_as_loads, codegen/generic_emit.py padded/concatenated): no copy
kernel writes the padded or concatenated tensor. Each model is compared with eager on fresh random
inputs, fp32 and bf16."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import uniorch


class Pools(nn.Module):
    """One conv output read by three padded poolings (two share the padded input)."""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        y = self.c(x)
        return (F.max_pool2d(y, 3, 2, 1), F.avg_pool2d(y, 3, 1, 1),
                F.avg_pool2d(y, 3, 2, 1, count_include_pad=False))


class PadArith(nn.Module):
    def forward(self, x):
        return F.pad(x, (1, 2, 0, 3), value=0.5) * 2 + 1


class PadSum(nn.Module):
    """The pad of a computed value (sin): the pointwise kernel stores it, the reduction pads it."""

    def forward(self, x):
        return F.pad(x.sin(), (2, 1), value=-1.0).sum(-1)


class PadMaxPool1d(nn.Module):
    def forward(self, x):
        return F.max_pool1d(x, 4, 3, 2, ceil_mode=True)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    """Llama's rotary embedding of a projection: the negation and the concatenation fuse into the
    kernel applying cos and sin (passes/concat_pieces.py moves the negation after the concat)."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(16, 16)

    def forward(self, x):
        q = self.q(x).view(2, 5, 2, 8).transpose(1, 2)
        pos = torch.arange(5, dtype=x.dtype)[:, None] * torch.arange(1, 9, dtype=x.dtype)
        return q * pos.cos() + rotate_half(q) * pos.sin()


class CatScaled(nn.Module):
    """Three pieces, two computed (scaled, exp), concatenated along a middle dim, then reduced."""

    def forward(self, x, y):
        return torch.cat((x * 3, y, x.exp()), dim=1).amax(-1)


class ClsToken(nn.Module):
    """ViT's embeddings: a broadcast class token concatenated before the patches, a position
    embedding added, then LayerNorm. The broadcast piece is computed, so that concat stays a copy
    (and must not be half-fused into the norm's kernel: it fell back to eager once)."""

    def __init__(self):
        super().__init__()
        self.cls = nn.Parameter(torch.randn(1, 1, 8))
        self.pos = nn.Parameter(torch.randn(1, 6, 8))
        self.ln = nn.LayerNorm(8)

    def forward(self, x):
        e = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1) + self.pos
        return self.ln(e), e


class ClsResidual(nn.Module):
    """ViT's embeddings into a pre-norm block: the class token and the projected patches (both
    written by kernels) concatenated, plus positions, read by the norm and by the projection's
    residual epilogue: the matmul's kernel reads the pieces as masked loads too, no copy kernel."""

    def __init__(self):
        super().__init__()
        self.patch, self.fc = nn.Linear(12, 16), nn.Linear(16, 16)
        self.cls = nn.Parameter(torch.randn(1, 1, 16))
        self.pos = nn.Parameter(torch.randn(1, 7, 16))
        self.ln = nn.LayerNorm(16)

    def forward(self, x):
        e = torch.cat((self.cls.expand(x.shape[0], -1, -1), self.patch(x)), dim=1) + self.pos
        return self.fc(self.ln(e)) + e


CASES = [(Pools, (2, 3, 13, 11)), (PadArith, (2, 5, 7)), (PadSum, (4, 9)), (PadMaxPool1d, (2, 3, 17)),
         (Rotary, (2, 5, 16)), (CatScaled, ((2, 3, 6), (2, 4, 6)))]
COPIED = {ClsToken: (3, 5, 8)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("cls,shape", CASES, ids=[c.__name__ for c, _ in CASES])
def test_padded_and_concatenated_reads_need_no_copy_kernel(cls, shape, dtype):
    torch.manual_seed(int.from_bytes(__import__("os").urandom(4), "little"))
    model = cls().to(dtype).eval()
    shapes = shape if isinstance(shape[0], tuple) else (shape,)
    cm = uniorch.compile(model, target="interpret")
    rep = cm.explain(*[torch.randn(s, dtype=dtype) for s in shapes])
    assert not rep.fallbacks, str(rep)
    assert "copy" not in [k.kind for k in rep.kernels], str(rep)
    xs = [torch.randn(s, dtype=dtype) for s in shapes]
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cm(*xs), model(*xs), **tol)


def test_concat_read_by_a_matmul_epilogue_needs_no_copy_kernel():
    """fp32: in bf16 this small model still copies the concatenation (its 16-bit pieces are
    widened for the epilogue; hf_vit's bf16 embeddings do not copy)."""
    torch.manual_seed(int.from_bytes(__import__("os").urandom(4), "little"))
    model = ClsResidual().eval()
    cm = uniorch.compile(model, target="interpret")
    rep = cm.explain(torch.randn(3, 6, 12))
    assert not rep.fallbacks, str(rep)
    assert "copy" not in [k.kind for k in rep.kernels], str(rep)
    x = torch.randn(3, 6, 12)
    torch.testing.assert_close(cm(x), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cls,shape", COPIED.items(), ids=[c.__name__ for c in COPIED])
def test_concat_of_computed_pieces_compiles_whole(cls, shape):
    model = cls()
    cm = uniorch.compile(model, target="interpret")
    rep = cm.explain(torch.randn(shape))
    assert not rep.fallbacks, str(rep)
    x = torch.randn(shape)
    torch.testing.assert_close(cm(x), model(x), rtol=1e-5, atol=1e-5)


def test_integer_pad_value():
    model = lambda x: F.pad(x, (3, 1), value=7) * 3 - 1  # noqa: E731
    x = torch.randint(-50, 50, (3, 6))
    cm = uniorch.compile(model, target="interpret")
    rep = cm.explain(x)
    assert "copy" not in [k.kind for k in rep.kernels], str(rep)
    y = torch.randint(-50, 50, (3, 6))
    assert torch.equal(cm(y), model(y))
