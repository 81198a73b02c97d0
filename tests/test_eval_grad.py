"""An eval-mode model called with grad enabled: results that require grad as eager's, and a
backward through them gives the parameters eager's gradients (runtime/eval_grad.py)."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch


def _frozen_bn_net():
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))


def test_fine_tuning_with_batchnorm_frozen_in_eval_mode_trains_like_eager():
    torch.manual_seed(0)
    model = _frozen_bn_net()
    model[1].running_mean.normal_()
    model[1].running_var.uniform_(0.5, 2.0)
    model.eval()
    ref, head = copy.deepcopy(model), nn.Linear(8, 3)
    cm = uniorch.compile(model, target="interpret")
    for step in range(2):
        x, y = torch.randn(5, 8), torch.randint(0, 3, (5,))
        out = cm(x)
        assert out.requires_grad and ref(x).requires_grad
        model.zero_grad(), ref.zero_grad()
        if step == 0:  # the first backward through an inference call: recomputed eagerly, said once
            with pytest.warns(RuntimeWarning, match="later calls take the training path"):
                (F.cross_entropy(out, y) + F.cross_entropy(head(x), y)).backward()
        else:
            (F.cross_entropy(out, y) + F.cross_entropy(head(x), y)).backward()
        (F.cross_entropy(ref(x), y) + F.cross_entropy(head(x), y)).backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"step {step} {name}: {m}")
    tc = cm.training_compile  # the second step ran the training path, in eval mode
    assert tc.forward and tc.backward and not model.training
    torch.testing.assert_close(model[1].running_mean, ref[1].running_mean)  # eval mode: stats untouched


def test_eval_mode_inference_without_no_grad_stays_on_the_inference_kernels():
    torch.manual_seed(1)
    model = _frozen_bn_net().eval()
    cm = uniorch.compile(model, target="interpret")
    x = torch.randn(4, 8)
    out = cm(x)
    assert out.requires_grad  # as eager's
    torch.testing.assert_close(out, model(x))
    assert cm._training is None  # no backward: nothing traced for training
    with torch.no_grad():
        assert not cm(x).requires_grad


def test_frozen_parameters_and_functions_are_left_as_they_are():
    torch.manual_seed(2)
    model = _frozen_bn_net().eval().requires_grad_(False)
    x = torch.randn(4, 8)
    assert not uniorch.compile(model, target="interpret")(x).requires_grad
    assert not uniorch.compile(lambda t: t.sin() * 2, target="interpret")(x).requires_grad


def test_compiled_blocks_of_an_eval_mode_model_chain_their_gradients():
    """Each block compiled on its own (`nn.ModuleList(uniorch.compile(b) ...)`): a block's input
    requiring grad as the previous block's result keeps it on the inference kernels, and a
    backward reaches every block's parameters, a frozen block's input gradient included."""
    torch.manual_seed(3)
    blocks = nn.ModuleList([_frozen_bn_net()[:3], nn.Sequential(nn.Linear(16, 16), nn.GELU()), nn.Linear(16, 3)])
    blocks[1].requires_grad_(False)  # frozen in the middle: the gradient must still pass through it
    blocks.eval()
    ref = copy.deepcopy(blocks)
    compiled = [uniorch.compile(b, target="interpret") for b in blocks]
    x = torch.randn(4, 8)
    h, r = x, x
    for cm, b in zip(compiled, ref):
        h, r = cm(h), b(r)
    assert h.requires_grad and all(cm._training is None for cm in compiled)  # all three on the inference path
    torch.testing.assert_close(h, r, rtol=1e-4, atol=1e-5)
    with pytest.warns(RuntimeWarning, match="recomputed in PyTorch"):
        h.square().mean().backward()
    r.square().mean().backward()
    for (name, p), q in zip(blocks.named_parameters(), ref.parameters()):
        assert (p.grad is None) == (q.grad is None), name
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


class _NoGradForward(torch.nn.Module):
    def __init__(self, how):
        super().__init__()
        self.lin, self.how = torch.nn.Linear(8, 8), how

    def forward(self, x):
        mode = torch.no_grad() if self.how == "no_grad" else torch.inference_mode()
        with mode:
            return self.lin(x).relu()


@pytest.mark.parametrize("how", ["no_grad", "inference_mode"])
def test_a_forward_that_disables_grad_returns_results_without_grad(how):
    # Meta's Llama decorates its forward with @torch.inference_mode(): the compiled results
    # required grad (an eval-mode call with grad enabled), and `.numpy()` on them raised
    model = _NoGradForward(how).eval()
    cm = uniorch.compile(model)
    x = torch.randn(2, 8)
    got, want = cm(x), model(x)
    assert not got.requires_grad and not want.requires_grad
    torch.testing.assert_close(got, want)
    got.numpy()
