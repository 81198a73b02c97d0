"""What the user's own code reads and writes outside the model's tensors, followed as eager does.

A global or a dict item the forward reads is guarded (changing it recompiles), a write the forward
or a hook makes outside the graph happens at every call with real values (the call runs through
Dynamo, which replays it), and an eval-mode call with grad enabled gives gradients of what it
returned. Each was silently wrong: the values at capture, FakeTensors in the user's dict, or
gradients of another draw of the noise."""
import gc
import types

import pytest
import torch
from torch import nn

import uniorch

SCALE = 1.0
CFG = {"scale": 1.0}
LOG = []


class _Global(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 3)

    def forward(self, x):
        return self.lin(x) * SCALE * CFG["scale"]


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_a_global_and_a_global_dicts_item_the_forward_reads_are_guarded():
    global SCALE
    model = _Global()
    cm = uniorch.compile(model)
    x = torch.randn(4, 8)
    try:
        for scale, item in [(1.0, 1.0), (5.0, 1.0), (5.0, 2.0)]:
            SCALE, CFG["scale"] = scale, item
            _close(cm(x), model(x))
        assert any("SCALE" in r for r in cm.recompiles) and any("CFG" in r for r in cm.recompiles)
    finally:
        SCALE, CFG["scale"] = 1.0, 1.0


class _Held(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.cfg = {"k": 1.0}
        self.factors = [1.0]
        self.anchors = [torch.zeros(8)]

    def forward(self, x):
        return self.lin(x) * self.cfg["k"] * self.factors[0] + self.anchors[0]


@torch.no_grad()
def test_items_of_a_modules_dict_and_lists_are_guarded():
    model = _Held()
    cm = uniorch.compile(model)
    x = torch.randn(4, 8)
    _close(cm(x), model(x))
    model.cfg["k"] = 2.0
    _close(cm(x), model(x))
    model.factors[0] = 4.0
    _close(cm(x), model(x))
    model.anchors[0] = torch.ones(8)  # another tensor
    _close(cm(x), model(x))
    model.anchors[0].add_(1.0)  # the same tensor, updated
    _close(cm(x), model(x))


@torch.no_grad()
def test_a_hook_storing_an_activation_stores_each_calls_activation():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    saved, calls = {}, []
    model[1].register_forward_hook(lambda mod, inputs, out: saved.__setitem__("act", out))
    model[0].register_forward_pre_hook(lambda mod, inputs: calls.append(1))
    cm = uniorch.compile(model)
    for _ in range(3):
        x = torch.randn(2, 8)
        before = len(calls)
        out = cm(x)
        assert len(calls) == before + 1  # the pre-hook ran once, as in eager
        assert type(saved["act"]) is torch.Tensor
        act = saved["act"]
        _close(act, torch.relu(model[0](x)))
        _close(out, model[2](act))


class _Logs(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 3)
        self.stats = {}

    def forward(self, x):
        out = self.lin(x)
        self.stats["mean"] = out.mean().item()
        LOG.append(out.detach())
        return out


@torch.no_grad()
def test_writes_the_forward_makes_outside_the_graph_happen_at_every_call():
    model = _Logs()
    cm = uniorch.compile(model)
    LOG.clear()
    for n in range(1, 4):
        x = torch.randn(4, 8)
        want = model.lin(x)
        _close(cm(x), want)
        assert model.stats["mean"] == pytest.approx(want.mean().item(), abs=1e-6)
        assert len(LOG) == n and type(LOG[-1]) is torch.Tensor
        _close(LOG[-1], want)
    LOG.clear()


class _Noisy(nn.Module):  # a VAE's reparameterisation draws noise in eval mode too
    def __init__(self):
        super().__init__()
        self.enc, self.dec = nn.Linear(8, 8), nn.Linear(4, 8)

    def forward(self, x):
        mu, logvar = self.enc(x).chunk(2, -1)
        z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
        return self.dec(z), z


def test_an_eval_mode_call_drawing_noise_differentiates_what_it_returned():
    model = _Noisy().eval()
    cm = uniorch.compile(model)
    for _ in range(2):
        model.zero_grad()
        out, z = cm(torch.randn(4, 8))
        (out * out).sum().backward()
        _close(model.dec.weight.grad, 2 * out.detach().t() @ z.detach())


def test_an_eval_mode_call_whose_weights_change_before_the_backward_raises():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).eval()
    cm = uniorch.compile(model)
    out = cm(torch.randn(4, 8))
    with torch.no_grad():
        model[0].bias.add_(1.0)
    with pytest.raises(RuntimeError, match="modified in place before the backward"):
        out.sum().backward()


@torch.no_grad()
def test_a_forward_set_on_the_instance_is_followed():
    model = nn.Sequential(nn.Linear(4, 4))
    cm = uniorch.compile(model)
    x = torch.randn(2, 4)
    _close(cm(x), model(x))
    model.forward = types.MethodType(lambda self, x: self[0](x) * 10, model)
    _close(cm(x), model(x))


def test_explain_without_inputs_reports_the_last_call_of_either_path():
    cm = uniorch.compile(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)))  # train mode
    with torch.no_grad():
        cm(torch.randn(4, 8))
    assert cm.explain().kernels  # it ran the training path with no inputs
    cm(torch.randn(4, 8)).sum().backward()
    assert cm.explain().backward is not None


class _InferenceCache(nn.Module):  # Meta's Llama: @torch.inference_mode() forward, freqs_cis moved, KV cache
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("cache", torch.zeros(2, 16, 8), persistent=False)
        self.freqs = torch.randn(16, 8)

    @torch.inference_mode()
    def forward(self, x, pos: int):
        y = self.lin(x)
        self.freqs = self.freqs.to(y.device)
        self.cache[:, pos:pos + x.shape[1]] = y
        return self.cache[:, :pos + x.shape[1]].sum(1) + self.freqs[pos]


def test_a_call_dynamo_cannot_compile_leaves_pytorch_working():
    # AOTAutograd fails on it under inference mode ("Cannot set version_counter for inference
    # tensor"), and left the Python dispatcher's key set in the thread: every later indexing in
    # the process, eager included, raised an INTERNAL ASSERT
    model, ref = _InferenceCache().eval(), _InferenceCache().eval()
    ref.load_state_dict(model.state_dict())
    ref.freqs = model.freqs.clone()
    cm = uniorch.compile(model)
    x = torch.randn(2, 3, 8)
    state = (torch._C._dispatch_tls_local_include_set(), torch._C._dispatch_tls_local_exclude_set())
    with pytest.warns(RuntimeWarning, match="Cannot set version_counter"):
        got = cm(x, 0)
    _close(got, ref(x, 0))
    assert got[:, -1].shape == (2,) and torch.randn(3, 3)[:, -1].shape == (3,)
    # inference mode stayed on (every new parameter an inference tensor), and collecting the failed
    # trace's frames later brought back the dispatcher flags of the middle of the trace
    gc.collect()
    assert not torch.is_inference_mode_enabled() and not nn.Linear(2, 2).weight.is_inference()
    assert (torch._C._dispatch_tls_local_include_set(), torch._C._dispatch_tls_local_exclude_set()) == state
