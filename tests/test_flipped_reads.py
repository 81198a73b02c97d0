"""Flips are indexing maps, and input-gradient convolutions pad without a zero buffer.

torch-mlir lowers `aten.flip` (and the flipped, transposed filters of a convolution's input
gradient) as a gather: `w[co, ci, 2 - kh, 2 - kw]` through `tensor.extract` at computed indices.
uniorch-preprocess reads such positions as affine functions of one loop (passes/extract_operands.py),
so the flip is a map read: loaded in place, without bounds masks, by any kernel that reads it.
The input gradient's padding is an insert_slice into a zero fill that every such convolution of a
backward graph shares (CSE); each convolution now takes a copy of the fill as a constant
(passes/fuse_factors.py try_join_stuffed), so no padded buffer is written and read back.
"""
import pytest
import torch
from torch import nn

import uniorch
from uniorch.testing.gradients import weighted_grads


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


class ConvPair(nn.Module):
    def __init__(self, c: int = 8):
        super().__init__()
        self.c1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.c2 = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.c2(torch.relu(self.c1(x)))


@pytest.mark.parametrize("dims", [(-1,), (1, 2), (0, 2)])
def test_flip_matches_eager(dims):
    gen = torch.Generator().manual_seed(11)
    x, y = torch.randn(3, 5, 7, generator=gen), torch.randn(3, 5, 7, generator=gen)

    def fn(x, y):
        return torch.tanh(x.flip(dims) * y) + x.flip(dims).sum(-1, keepdim=True)

    cm = uniorch.compile(fn, target="interpret", fallback="error")
    assert _rel(cm(x, y), fn(x, y)) <= 1e-6


def test_flipped_factor_of_a_matmul_matches_eager():
    gen = torch.Generator().manual_seed(12)
    x, w = torch.randn(9, 20, generator=gen), torch.randn(12, 20, generator=gen)

    def fn(x, w):
        return x.flip(0) @ w.flip(1).t()

    cm = uniorch.compile(fn, target="interpret", fallback="error")
    assert _rel(cm(x, w), fn(x, w)) <= 1e-5


def test_conv_input_gradients_match_eager():
    torch.manual_seed(0)
    x = torch.randn(2, 8, 7, 7)
    for got, want in weighted_grads(ConvPair, x, seed=3):
        assert _rel(got, want) <= 1e-5


def test_backward_convolutions_write_no_padded_buffer():
    torch.manual_seed(0)
    model = ConvPair(8)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    x = torch.randn(2, 8, 6, 6, requires_grad=True)
    cm(x).square().mean().backward()
    rep = cm.explain(torch.randn(2, 8, 6, 6))
    bw = rep.backward
    assert bw is not None and not bw.fallbacks, str(rep)
    kinds = sorted(k.kind for k in bw.kernels)
    # two input gradients (one fused with ReLU's backward), two weight gradients and their batch
    # sums; before, a pointwise kernel wrote the zero-padded [2, 8, 8, 8] buffer both read
    assert "pointwise" not in kinds, str(bw)
    padded = 2 * 8 * 8 * 8 * 4
    assert all(k.bytes_written != padded for k in bw.kernels), str(bw)
