"""A linear layer's bias gradient in its weight gradient's kernel (passes/fuse_operand_sums.py):
sum(dY, rows) is summed from the dY tiles the dYᵀ X product's K loop loads, not by a kernel that
reads dY again. Numerics against eager on fresh inputs; kernels and bytes from `uniorch.explain`;
a Linear layer's training backward; the generated PTX for sm_90."""
import pytest
import torch
from torch import nn

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


class Grads(nn.Module):
    """dW = dYᵀ X with db = sum(dY, rows) (A factor's rows), and Xᵀ dE with dE's column sum (B's)."""

    def forward(self, dy, x, de):
        dy2, x2, de2 = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1]), de.reshape(-1, de.shape[-1])
        return dy2.t() @ x2, dy2.sum(0), x2.t() @ de2, de2.sum(0, keepdim=True)


def _nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
@pytest.mark.parametrize("shape", [(2, 9, 40, 24, 16), (3, 70, 150, 96, 130)], ids=["one_tile", "tails"])
def test_sums_ride_on_the_products(dtype, tol, shape):
    b, t, o, i, e = shape
    cm = uniorch.compile(Grads(), "interpret")
    gen = torch.Generator().manual_seed(sum(shape))
    args = tuple(torch.randn(b, t, n, generator=gen).to(dtype) for n in (o, i, e))
    got, want = cm(*args), Grads()(*[a.float() for a in args])
    for g, w in zip(got, want):
        assert g.dtype == dtype and g.shape == w.shape
        err = ((g.float() - w).abs().max() / w.abs().max()).item()
        assert err < tol, err
    rep = cm.explain(*args)
    assert [k.kind for k in rep.kernels] == ["contraction", "contraction"], [(k.name, k.ops) for k in rep.kernels]
    assert not rep.fallbacks
    # dY and dE read once (no kernel of their sums), X once per product, each output written once
    assert sum(k.bytes_read + k.bytes_written for k in rep.kernels) == _nbytes(*args, *got) + _nbytes(args[1])


def test_sum_along_features_stays_apart():
    """A sum of dY along its features is no sum over the product's rows: its own kernel. The sum over
    batch and tokens of the 3-D dY, which the product reads through a merge of those dims, rides on
    the product."""

    def fn(dy, x):
        dy2 = dy.reshape(-1, dy.shape[-1])
        return dy2.t() @ x.reshape(-1, x.shape[-1]), dy.sum(2), dy.sum((0, 1))

    class M(nn.Module):
        def forward(self, dy, x):
            return fn(dy, x)

    cm = uniorch.compile(M(), "interpret")
    args = (torch.randn(2, 30, 20), torch.randn(2, 30, 12))
    for g, w in zip(cm(*args), fn(*args)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    kernels = cm.explain(*args).kernels
    assert sorted(k.kind for k in kernels) == ["contraction", "reduction"], [(k.name, k.ops) for k in kernels]
    red = next(k for k in kernels if k.kind == "reduction")
    assert red.bytes_written == 2 * 30 * 4  # dy.sum(2)


@pytest.mark.parametrize("widths", [(24, 64, 24), (16, 1), (1, 8)], ids=["mlp", "one_output", "one_input"])
def test_linear_training_backward(widths):
    """nn.Linear's backward: every bias gradient comes out of a weight gradient's kernel (a layer
    with one output or one input too: a size-1 tile axis); the gradients match eager's."""
    def make():
        layers = [nn.Linear(a, b) for a, b in zip(widths, widths[1:])]
        return nn.Sequential(*[m for lin in layers for m in (lin, nn.GELU())][:-1])

    torch.manual_seed(0)
    model, ref = make(), make()
    ref.load_state_dict(model.state_dict())
    cm = uniorch.compile(model, "interpret")
    x = torch.randn(3, 37, widths[0])
    cm(x).pow(2).mean().backward()
    ref(x).pow(2).mean().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
    bw = cm.explain(x).backward
    assert not bw.fallbacks, [(f.op, f.why) for f in bw.fallbacks]
    sums = [k for k in bw.kernels if any("aten.sum" in op for op, _ in k.ops)]
    assert len(sums) == len(widths) - 1 and all(k.kind == "contraction" for k in sums), \
        [(k.name, k.kind, k.ops) for k in bw.kernels]


def test_ptx_sm90():
    """Cross-compiled for sm_90 the sum is part of the product's kernel and ptxas accepts it."""
    pytest.importorskip("triton")
    args = (torch.randn(4, 64, 96, dtype=torch.bfloat16), torch.randn(4, 64, 80, dtype=torch.bfloat16),
            torch.randn(4, 64, 48, dtype=torch.bfloat16))
    try:
        art = uniorch.compile_aot(Grads(), args, target="cuda:sm_90")
    except uniorch.UniorchError as err:  # no Triton CUDA backend in this environment
        pytest.skip(str(err))
    srcs = [k.source.source if hasattr(k.source, "source") else str(k.source) for k in art.kernels]
    assert len(art.kernels) == 2 and all("tl.reduce(" in s and "tl.dot(" in s for s in srcs), srcs
    for k in art.kernels:
        ptx = k.compiled.asm["ptx"]
        assert "mma" in ptx or "wgmma" in ptx


def test_autocast_bias_gradient():
    """Under bf16 autocast the bias gradient is the bf16 sum widened to the fp32 parameter's type:
    the casts ride along (rounded to bf16 first, as eager's)."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(24, 64), nn.GELU(), nn.Linear(64, 24))
    ref = nn.Sequential(nn.Linear(24, 64), nn.GELU(), nn.Linear(64, 24))
    ref.load_state_dict(model.state_dict())
    cm = uniorch.compile(model, "interpret")
    x = torch.randn(3, 37, 24)
    for m, rec in ((cm, model), (ref, ref)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = m(x)
        y.float().pow(2).mean().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.grad.dtype == q.grad.dtype == torch.float32
        err = ((p.grad - q.grad).abs().max() / q.grad.abs().max()).item()
        assert err < 2e-2, err
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bw = cm.explain(x).backward
    assert not bw.fallbacks
    assert not [k for k in bw.kernels if k.kind == "reduction"], [(k.name, k.ops) for k in bw.kernels]


def test_float64_sums_accumulate_in_float64():
    """A float64 model's bias gradient was summed in a float32 accumulator (3e-7 off on values of
    ~6, eager's error is 1e-15); it sums in float64 now, as the product does."""
    cm = uniorch.compile(Grads(), "interpret")
    args = tuple(torch.randn(2, 50, n, dtype=torch.float64) * 4 for n in (40, 24, 16))
    for g, w in zip(cm(*args), Grads()(*args)):
        assert g.dtype == torch.float64
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)
    src = "".join(k.source for k in cm.explain(*args).kernels)
    assert "osum0 = tl.full((BLOCK_M,), 0.0, tl.float64)" in src
