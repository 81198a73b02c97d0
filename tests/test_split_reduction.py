"""Split reductions (passes/split_reduction.py): a contraction with few outputs and a long sum (a
convolution's weight gradient, a batched product summed over its batch) runs as partial sums over
one reduction dim, that many times more programs, then a kernel adding the partials. Numerics
against float64 beside eager's on fresh inputs; kernels and grids from `explain`."""
import pytest
import torch
import torch.nn.functional as F

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


def _weight_grad(x, dy, w):
    return torch.ops.aten.convolution_backward(dy, x, w, [0], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                               [False, True, False])[1]


def _err(got, ref64):
    return (got.double() - ref64).abs().max().item()


def test_weight_gradient_splits_over_the_batch():
    torch.manual_seed(0)
    x, dy, w = torch.randn(16, 8, 32, 32), torch.randn(16, 8, 32, 32), torch.randn(8, 8, 3, 3)
    rep = uniorch.explain(_weight_grad, x, dy, w, target="interpret")
    assert [k.kind for k in rep.kernels] == ["contraction", "reduction"], str(rep)
    assert int(str(rep.kernels[0].schedule["grid"]).strip("[]").split(",")[1]) == 16, rep.kernels[0].schedule
    # the partials: 16 x the 8x8x3x3 gradient, written once and read once
    assert rep.kernels[0].bytes_written == 16 * w.numel() * 4 == rep.kernels[1].bytes_read
    cm = uniorch.compile(_weight_grad, target="interpret")
    x, dy = torch.randn(16, 8, 32, 32) * 3, torch.randn(16, 8, 32, 32)
    ref64 = _weight_grad(x.double(), dy.double(), w.double())
    assert _err(cm(x, dy, w), ref64) <= 2 * _err(_weight_grad(x, dy, w), ref64) + 1e-5


def _batch_sum(a, b):
    return torch.einsum("bik,bkj->ij", a, b)


def test_product_summed_over_its_batch_splits():
    torch.manual_seed(1)
    a, b = torch.randn(32, 16, 512), torch.randn(32, 512, 16)
    cm = uniorch.compile(_batch_sum, target="interpret")
    kinds = [k.kind for k in cm.explain(a, b).kernels]
    assert kinds == ["contraction", "reduction"], kinds
    ref64 = _batch_sum(a.double(), b.double())
    assert _err(cm(a, b), ref64) <= 2 * _err(_batch_sum(a, b), ref64) + 1e-5


def _linear_weight_grad(x, dy):
    return dy.t() @ x


def test_linear_weight_gradient_splits_its_rows():
    """A classifier head's weight gradient: 10 x 32 outputs summed over 8192 rows, one reduction
    dim: it is split in two (16 partials of 512 rows) through views of x and dy, and dyᵀ is still
    read in place by the matmul (no transposed copy kernel)."""
    torch.manual_seed(4)
    x, dy = torch.randn(8192, 32), torch.randn(8192, 10)
    rep = uniorch.explain(_linear_weight_grad, x, dy, target="interpret")
    assert [k.kind for k in rep.kernels] == ["contraction", "reduction"], str(rep)
    assert int(str(rep.kernels[0].schedule["grid"]).strip("[]").split(",")[1]) == 16, rep.kernels[0].schedule
    assert rep.kernels[0].bytes_read == (x.numel() + dy.numel()) * 4, str(rep)
    cm = uniorch.compile(_linear_weight_grad, target="interpret")
    x, dy = torch.randn(8192, 32) * 2, torch.randn(8192, 10)
    ref64 = _linear_weight_grad(x.double(), dy.double())
    assert _err(cm(x, dy), ref64) <= 2 * _err(_linear_weight_grad(x, dy), ref64) + 1e-5


def test_short_reductions_and_many_outputs_stay_one_kernel():
    torch.manual_seed(2)
    conv = torch.nn.Conv2d(8, 8, 3, padding=1).eval()  # forward: K = 72 products per output
    rep = uniorch.explain(conv, torch.randn(16, 8, 32, 32), target="interpret")
    assert [k.kind for k in rep.kernels] == ["contraction"], str(rep)
    # a weight gradient with many outputs: enough programs without a split
    x, dy, w = torch.randn(2, 64, 16, 16), torch.randn(2, 128, 16, 16), torch.randn(128, 64, 3, 3)
    rep = uniorch.explain(_weight_grad, x, dy, w, target="interpret")
    assert "reduction" not in [k.kind for k in rep.kernels], str(rep)


def test_conv_net_trains_like_eager_with_split_weight_gradients():
    """Batch 8 of 32x32 images: both weight gradients sum 8192 products per element (split over the batch)."""
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, padding=1))
    x = torch.randn(8, 3, 32, 32)
    net(x).square().mean().backward()
    want = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    cm = uniorch.compile(net, target="interpret")
    cm(x).square().mean().backward()
    for got, exp in zip([p.grad for p in net.parameters()], want):
        torch.testing.assert_close(got, exp, rtol=1e-4, atol=1e-5)
