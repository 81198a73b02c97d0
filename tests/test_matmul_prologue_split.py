"""A linear layer's GELU output that is also returned (as a training forward saves the pre-activation)
stays out of the next matmul's body (passes/split_prologue.py): upstream elementwise fusion had put
the GELU into it, leaving a generic reduction that recomputed the GELU for every output column and
had no tl.dot. Numerics against eager on fresh inputs; kernel kinds from `uniorch.explain`; a
training MLP's forward."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


class SavedPreActivation(nn.Module):
    def forward(self, x, w, b, w2):
        h = torch.addmm(b, x.view(-1, x.shape[-1]), w).view(*x.shape[:-1], -1)
        return h, F.gelu(h, approximate="tanh").view(-1, h.shape[-1]) @ w2


@pytest.mark.parametrize("model", [SavedPreActivation])
@pytest.mark.parametrize("shape", [(4, 64, 32, 128, 32), (3, 21, 24, 72, 40)])
def test_gelu_of_a_returned_value_is_no_matmul_prologue(model, shape):
    b, t, d, hidden, out = shape
    gen = torch.Generator().manual_seed(sum(shape))
    args = (torch.randn(b, t, d, generator=gen), torch.randn(d, hidden, generator=gen) / d ** 0.5,
            torch.randn(hidden, generator=gen), torch.randn(hidden, out, generator=gen) / hidden ** 0.5)
    cm = uniorch.compile(model(), "interpret")
    for g, w in zip(cm(*args), model()(*args)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    kernels = cm.explain(*args).kernels
    assert [k.kind for k in kernels] == ["contraction", "contraction"], [(k.name, k.kind, k.ops) for k in kernels]
    assert all("tl.dot(" in k.source for k in kernels)


def test_training_mlp_forward_kernels_are_matmuls():
    """A Linear -> GELU -> Linear training step: every kernel with a matmul uses tl.dot, and the
    forward is two kernels: the first layer's stores the pre-activation the backward needs and its
    GELU (passes/epilogue_views.py runs the GELU over the 2-D product it views as 3-D)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(approximate="tanh"), nn.Linear(128, 32))
    ref = nn.Sequential(nn.Linear(32, 128), nn.GELU(approximate="tanh"), nn.Linear(128, 32))
    ref.load_state_dict(model.state_dict())
    cm = uniorch.compile(model, "interpret")
    x = torch.randn(4, 64, 32)
    cm(x).pow(2).mean().backward()
    ref(x).pow(2).mean().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
    rep = cm.explain(x)
    assert [k.kind for k in rep.kernels] == ["contraction", "contraction"], [(k.name, k.ops) for k in rep.kernels]
    for k in rep.kernels + rep.backward.kernels:
        if any(op.split(".")[1] in ("mm", "addmm", "bmm") for op, _ in k.ops if "." in op):
            assert k.kind != "reduction" or "tl.dot(" in k.source, (k.name, k.ops)
