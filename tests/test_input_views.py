"""Outputs eager returns as views of the model's inputs are views of the caller's tensors
(capture/input_views.py): a write through one reaches the input, and its strides are eager's."""
import pytest
import torch

import uniorch


class Views(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.randn(3, 4))

    def forward(self, x):
        return x.t(), self.buf[1:].t(), x.unsqueeze(0).permute(2, 0, 1), x.diagonal(), x * 2


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _check_views(got, want, bases_got, bases_want):
    for g, w, bg, bw in zip(got, want, bases_got, bases_want):
        torch.testing.assert_close(g, w)
        assert g.stride() == w.stride() and g.storage_offset() == w.storage_offset()
        assert _shares(g, bg) == _shares(w, bw)


def test_transposed_and_permuted_views_of_inputs_and_buffers_alias_them():
    model = Views()
    cm = uniorch.compile(Views())
    cm.load_state_dict(model.state_dict())
    for _ in range(2):
        x = torch.randn(3, 4)
        xe = x.clone()
        got, want = cm(x), model(xe)
        _check_views(got, want, [x, cm.buf, x, x, x], [xe, model.buf, xe, xe, xe])
        for g, w in zip(got[:4], want[:4]):  # a write through each view reaches what it views
            g.mul_(3)
            w.mul_(3)
        torch.testing.assert_close(x, xe)
        torch.testing.assert_close(cm.buf, model.buf)


def test_a_view_of_an_input_the_model_writes_sees_the_write():
    def f(x):
        x.add_(1)
        return x.t(), x.sum()

    cm = uniorch.compile(f)
    x = torch.randn(3, 5)
    xe = x.clone()
    (got, s), (want, se) = cm(x), f(xe)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(s, se)
    assert _shares(got, x) and got.stride() == want.stride()
    got.zero_()
    want.zero_()
    torch.testing.assert_close(x, xe)


@pytest.mark.parametrize("how", ["dynamic", "torch.compile"])
def test_views_at_several_sizes(how):
    def f(x):
        return x.t(), x.view(x.shape[0] * 2, -1), x.unbind(1)[1], x + 1

    cm = uniorch.compile(f, dynamic=True) if how == "dynamic" else torch.compile(f, backend="uniorch")
    for n in (4, 6, 3):
        x = torch.randn(n, 6)
        xe = x.clone()
        got, want = cm(x), f(xe)
        _check_views(got, want, [x] * 4, [xe] * 4)
        for g, w in zip(got[:3], want[:3]):
            g.add_(1)
            w.add_(1)
        torch.testing.assert_close(x, xe)


def test_a_view_of_an_input_laid_out_otherwise_than_when_traced_is_eager_s_view():
    def f(x):
        return x.t()

    cm = uniorch.compile(f)
    cm(torch.randn(3, 4))
    x = torch.randn(4, 3).t()  # the same shape, transposed
    got = cm(x)
    assert _shares(got, x) and got.stride() == f(x).stride()
    torch.testing.assert_close(got, f(x))


class WeightView(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x), x.t(), self.lin.weight.t()


@pytest.mark.parametrize("input_grad", [False, True])
def test_views_of_what_requires_grad_carry_the_gradient(input_grad):
    model = WeightView().eval()  # grad enabled in eval mode: the inference path, gradients attached
    cm = uniorch.compile(model)
    x = torch.randn(3, 4, requires_grad=input_grad)
    xe = x.detach().clone().requires_grad_(input_grad)
    got = cm(x)
    assert _shares(got[1], x) and _shares(got[2], model.lin.weight)
    assert got[2].requires_grad and got[1].requires_grad == input_grad
    (got[0].sum() + (got[1] * 2).sum() + (got[2] * 3).sum()).backward()
    grads = [p.grad.clone() for p in model.parameters()] + ([x.grad] if input_grad else [])
    model.zero_grad()
    want = model(xe)
    (want[0].sum() + (want[1] * 2).sum() + (want[2] * 3).sum()).backward()
    for g, w in zip(grads, [p.grad for p in model.parameters()] + ([xe.grad] if input_grad else [])):
        torch.testing.assert_close(g, w)


def test_bundles_return_views_of_their_inputs(tmp_path):
    def f(x):
        return x.t(), x.unsqueeze(1).expand(-1, 2, -1), x + 1

    x = torch.randn(3, 5)
    uniorch.compile_aot(f, (x,), target="cpu").save(tmp_path / "b")
    loaded = uniorch.load(tmp_path / "b")
    x = torch.randn(3, 5)
    xe = x.clone()
    got, want = loaded(x), f(xe)
    _check_views(got, want, [x] * 3, [xe] * 3)
    got[0].mul_(2)
    want[0].mul_(2)
    torch.testing.assert_close(x, xe)
