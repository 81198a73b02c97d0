"""A training step of every architecture test_transformers_defaults compiles (72): train mode in
the default config (dropout on), `loss.backward()` through `uniorch.compile(model)`, the gradients
judged against an fp64 eager run of the same weights, as eager fp32's are. PyTorch draws the
dropout masks (UNIORCH_FALLBACK_RANDOM=1) so every run draws the same ones.

Judged against fp64, not against eager fp32: BatchNorm over a few values per channel (LeViT) leaves
eager's fp32 loss 1e-3 from fp64's where uniorch's is 2e-5 away; a class token's gradient is a
cancelling sum whose fp32 value is noise in both. All gradients form one vector (its L2 error), so
a tensor whose exact gradient is near zero does not decide. The causal LMs take transformers' own
loss (labels); the others a fixed random projection of their main output. CI runs two; the rest
with UNIORCH_SLOW_TESTS=1 (about 20 s each on the cpu target)."""
import copy

import pytest
import torch

import uniorch
from uniorch import config

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")

from test_transformers_defaults import MODELS, OTHERS, _inputs  # noqa: E402

CI = ("llama", "bert")
# SpecAugment draws its time masks with numpy's generator, which Dynamo replaces by its own (as
# for Inductor: at numpy seed 0 both compilers mask other frames than eager); off, the rest compares
AUDIO = ("wav2vec2", "hubert", "wavlm")


def _loss(out, name):
    """(loss, its scale: the sum of its terms' magnitudes, against which rounding is judged)."""
    if name in MODELS:
        return out.loss, out.loss.abs().item()
    main = out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state
    proj = torch.randn(main.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    return (main.double() * proj).sum(), (main.double() * proj).abs().sum().item()


def _step(model, name, args, kwargs, dtype=None, run=None):
    """(loss, its scale, {parameter name: gradient}), the forward by `run` (default: the model)."""
    if dtype is not None:
        model = model.to(dtype)
        args = tuple(a.to(dtype) if a.is_floating_point() else a for a in args)
        kwargs = {k: v.to(dtype) if v.is_floating_point() else v for k, v in kwargs.items()}
    torch.manual_seed(1)
    loss, scale = _loss((model if run is None else run)(*args, **kwargs), name)
    loss.backward()
    return loss.item(), scale, {n: p.grad.double() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", sorted(MODELS) + sorted(OTHERS))
def test_training_step_as_accurate_as_eager(name, monkeypatch):
    if name not in CI and not config.flag("UNIORCH_SLOW_TESTS"):
        pytest.skip("UNIORCH_SLOW_TESTS=1 runs every architecture")
    monkeypatch.setenv("UNIORCH_FALLBACK_RANDOM", "1")
    torch.manual_seed(0)
    model = (MODELS[name] if name in MODELS else OTHERS[name])(transformers).train()
    if name in AUDIO:
        model.config.mask_time_prob = 0.0
    if name in MODELS:
        ids = torch.randint(0, 96, (2, 8))
        args, kwargs = (ids,), {"labels": ids}
    else:
        args, kwargs = _inputs(name)
    eager, exact = copy.deepcopy(model), copy.deepcopy(model)
    loss, scale, grads = _step(model, name, args, kwargs, run=uniorch.compile(model))
    eager_loss, _, eager_grads = _step(eager, name, args, kwargs)
    try:
        exact_loss, _, exact_grads = _step(exact, name, args, kwargs, torch.float64)
    except RuntimeError:  # no float64 kernel (the MoEs' grouped matmul), or XGLM's fp32 mask constant
        exact_loss, exact_grads = eager_loss, eager_grads  # overflows a float64 model: eager is the reference
    # a parameter the loss does not reach (BERT's pooler) has no gradient in eager; compiled, as
    # with torch.compile, a zero one
    assert set(eager_grads) <= set(grads)
    assert all(not grads[n].any() for n in set(grads) - set(eager_grads))
    names = sorted(eager_grads)

    def err(g):
        got, want = torch.cat([g[n].flatten() for n in names]), torch.cat([exact_grads[n].flatten() for n in names])
        return ((got - want).norm() / want.norm()).item()

    assert err(grads) <= max(10 * err(eager_grads), 1e-5), (err(grads), err(eager_grads))
    assert abs(loss - exact_loss) <= max(10 * abs(eager_loss - exact_loss), 1e-6 * scale), (loss, eager_loss, exact_loss)
