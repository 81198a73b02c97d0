"""Views built after compiled ops (as_strided on outputs and intermediates, reshape after permute,
transpose then view) equal eager's: values and, for outputs, strides. as_strided reads its operand's
storage, so a compiled intermediate laid out differently from eager's would give other values."""
import pytest
import torch

import uniorch


def _mm_as_strided(a, b):  # a view of a compiled output: overlapping windows of mm's result
    return torch.mm(a, b).as_strided((5, 3), (2, 1))


def _intermediate_as_strided(x):  # as_strided of a transposed intermediate, then more compute
    y = (x * 2 + 1).t()
    return y.as_strided((4, 4), (1, 6), 2).sin() + 1


def _as_strided_offset_of_view(x):  # as_strided of a view of an intermediate: its storage offset counts
    y = (x.exp())[1:, 2:]
    return y.as_strided((3, 2), (3, 2), 1) * 3


def _reshape_after_permute(x):  # reshape of a permuted value is a copy; of a view is a view
    y = (x + 1).permute(0, 2, 1)
    return y.reshape(x.shape[0], -1), y.reshape(-1, x.shape[1]).sum(1)


def _transpose_then_view(x):
    y = torch.relu(x).transpose(1, 2).contiguous().view(x.shape[0], -1)
    return y @ y.t()


def _heads(x, w):  # attention-style heads: view + transpose, a matmul, transpose back, view
    B, T, C = x.shape
    q = (x @ w).view(B, T, 2, C // 2).transpose(1, 2)
    s = q @ q.transpose(-1, -2)
    return (s.softmax(-1) @ q).transpose(1, 2).reshape(B, T, C).view(B * T, C)


def _output_view_strides(x):  # outputs that are views: eager's strides, not contiguous copies
    y = x * 3
    return y.t(), y[:, ::2], y.unsqueeze(1).expand(x.shape[0], 3, x.shape[1]), y.as_strided((2, 2), (1, 3))


def _unfold_like(x):  # sliding windows over a 1-D intermediate
    y = torch.cumsum(x, 0)
    return y.as_strided((y.numel() - 3, 4), (1, 1)).sum(-1)


CASES = {
    "mm_as_strided": (_mm_as_strided, lambda: (torch.randn(4, 6), torch.randn(6, 5))),
    "intermediate_as_strided": (_intermediate_as_strided, lambda: (torch.randn(5, 6),)),
    "as_strided_offset_of_view": (_as_strided_offset_of_view, lambda: (torch.randn(4, 6),)),
    "reshape_after_permute": (_reshape_after_permute, lambda: (torch.randn(2, 3, 4),)),
    "transpose_then_view": (_transpose_then_view, lambda: (torch.randn(2, 3, 5),)),
    "heads": (_heads, lambda: (torch.randn(2, 4, 8), torch.randn(8, 8))),
    "output_view_strides": (_output_view_strides, lambda: (torch.randn(4, 6),)),
    "unfold_like": (_unfold_like, lambda: (torch.randn(10),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_views_after_compiled_ops_match_eager(name):
    fn, make = CASES[name]
    torch.manual_seed(0)
    args = make()
    want = fn(*args)
    cm = uniorch.compile(fn, target="interpret")
    got = cm(*args)
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
        assert g.stride() == w.stride(), (g.stride(), w.stride())
    assert not cm.explain(*args).fallbacks


def test_views_of_outputs_after_the_call():
    """The caller builds views on compiled outputs as on eager's: `.t().view(-1)` of a transposed
    output (valid only with eager's strides) and `as_strided` over its storage."""
    def f(x):
        y = x.sigmoid() * 2
        return y.t(), y[1:, ::2]

    x = torch.randn(4, 6)
    want = f(x)
    got = uniorch.compile(f, target="interpret")(x)
    torch.testing.assert_close(got[0].t().view(-1), want[0].t().view(-1))
    torch.testing.assert_close(got[0].as_strided((5, 2), (1, 3)), want[0].as_strided((5, 2), (1, 3)))
    assert got[1].stride() == want[1].stride() and got[1].storage_offset() == want[1].storage_offset()
    torch.testing.assert_close(got[1], want[1])


def test_zero_element_view_output():
    def f(x):
        return (x + 1)[:, 2:2].t()

    x = torch.randn(3, 4)
    want, got = f(x), uniorch.compile(f, target="interpret")(x)
    assert got.shape == want.shape and got.stride() == want.stride()


@pytest.mark.parametrize("make", [
    lambda b: b.view(2, 8, 3, 16)[:, :, 1],           # one of q, k, v split off a projection
    lambda b: b.view(2, 8, 48).transpose(0, 1)[:, :, 16:32],
    lambda b: b.view(4, 4, 48)[::2, :, ::3],            # gaps in two dims
    lambda b: b.view(2, 8, 48)[:, :1, :5].expand(2, 3, 5),  # overlapping: an expand
    lambda b: b.view(2, 8, 48)[1:, 2:3, 7:9],
], ids=["qkv-slice", "transposed-slice", "two-gaps", "expanded", "unit-dims"])
def test_outputs_laid_out_as_eager_views_hold_the_values(make):
    """`laid_out` gives a contiguous kernel result eager's strides and offset: the strided copy
    (non-overlapping layouts) and the scatter of positions (overlapping ones) both put each value
    where eager's view reads it."""
    from uniorch.runtime.boundary import laid_out

    view = make(torch.randn(768))
    out = laid_out(view.contiguous(), (view.stride(), view.storage_offset()))
    assert out.stride() == view.stride() and out.storage_offset() == view.storage_offset()
    assert torch.equal(out, view)
