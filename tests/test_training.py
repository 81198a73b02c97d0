"""Training through uniorch: forward and backward graphs from AOTAutograd (min-cut partition), each
compiled to kernels; gradients and updated parameters compared with eager's on fresh inputs."""
import copy

import pytest
import torch
from torch import nn

import uniorch


def _rel(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(self.norm(torch.nn.functional.gelu(self.fc1(x))))


def _train(model, run, steps: int, seed: int):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(run(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def test_compiled_training_steps_match_eager():
    torch.manual_seed(0)
    model = MLP()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    got = _train(model, cm, 3, seed=1)
    want = _train(ref, ref, 3, seed=1)
    assert got == pytest.approx(want, rel=1e-4)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert _rel(p, q) <= 1e-4, name
        assert _rel(p.grad, q.grad) <= 1e-4, name
    tc = cm.training_compile
    assert len(tc.forward) == 1 and len(tc.backward) == 1  # one compile each for three steps
    rep = cm.explain(torch.randn(8, 16))
    assert rep.kernels and not rep.fallbacks, str(rep)
    assert rep.backward is not None and rep.backward.kernels and not rep.backward.fallbacks, str(rep)
    assert rep.backward.compiled_fraction >= 0.9
    assert "backward graph" in str(rep)


def test_inference_calls_stay_on_the_inference_path():
    torch.manual_seed(0)
    model = MLP().eval()
    cm = uniorch.compile(model, target="interpret")
    x = torch.randn(8, 16)
    out = cm(x)  # eval mode, grad enabled, input without grad: inference
    # requiring grad as eager's does: only a backward through it would trace for training (test_eval_grad.py)
    assert out.requires_grad and cm._training is None
    torch.testing.assert_close(out, model(x).detach(), rtol=1e-4, atol=1e-5)


def test_the_compiled_model_forwards_the_models_attributes():
    """As torch.compile's wrapper does: an optimizer made from the compiled model's parameters,
    zero_grad, train/eval and submodules reach the model itself."""
    torch.manual_seed(0)
    model = MLP()
    cm = uniorch.compile(model, target="interpret")
    assert [id(p) for p in cm.parameters()] == [id(p) for p in model.parameters()]
    assert cm.fc1 is model.fc1 and cm.state_dict().keys() == model.state_dict().keys()
    opt = torch.optim.SGD(cm.parameters(), lr=0.1)
    before = model.fc1.weight.detach().clone()
    cm(torch.randn(8, 16)).square().mean().backward()
    opt.step()
    assert not torch.equal(model.fc1.weight, before)
    cm.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    cm.eval()
    assert not model.training
    cm.train()
    assert model.training
    with pytest.raises(AttributeError):
        cm._not_forwarded
    with pytest.raises(AttributeError):
        uniorch.compile(lambda x: x + 1, target="interpret").parameters


def test_gradients_reach_inputs_that_require_grad():
    def fn(a, b):
        return (torch.tanh(a @ b) * a.sum(-1, keepdim=True)).sum()

    cm = uniorch.compile(fn, target="interpret")
    a, b = torch.randn(6, 5, requires_grad=True), torch.randn(5, 7, requires_grad=True)
    a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    cm(a, b).backward()
    fn(a2, b2).backward()
    assert _rel(a.grad, a2.grad) <= 1e-4 and _rel(b.grad, b2.grad) <= 1e-4


def test_torch_compile_backend_trains():
    torch.manual_seed(0)
    model = MLP()
    ref = copy.deepcopy(model)
    got = _train(model, torch.compile(model, backend="uniorch", options={"target": "interpret"}), 2, seed=3)
    want = _train(ref, ref, 2, seed=3)
    assert got == pytest.approx(want, rel=1e-4)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert _rel(p, q) <= 1e-4


class WritesIntoUnbindView(nn.Module):
    """An in-place write to a view from unbind while autograd records: eager PyTorch rejects it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        first, _ = y.unbind(0)
        first.mul_(2)
        return y


def test_a_model_error_in_training_is_the_models_own_error():
    """Dynamo cannot trace it; the training path warns and runs eager PyTorch, which raises the
    model's own error (not a compiler's)."""
    from torch._dynamo.exc import TorchDynamoException

    cm = uniorch.compile(WritesIntoUnbindView(), target="interpret")
    with pytest.warns(RuntimeWarning, match="Dynamo cannot compile WritesIntoUnbindView and it runs eagerly"):
        with pytest.raises(RuntimeError, match="is a view and is being modified inplace") as err:
            cm(torch.randn(2, 4))
    assert not isinstance(err.value, TorchDynamoException)
    assert cm.training_compile.failure
    rep = cm.explain(torch.randn(2, 4))
    assert not rep.kernels and rep.fallbacks and "training path" in rep.fallbacks[0].why


def test_batchnorm_in_training_mode_updates_running_statistics_as_eager():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 6 * 6, 4))
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    gen = torch.Generator().manual_seed(5)
    for _ in range(2):
        x = torch.randn(4, 3, 6, 6, generator=gen)
        cm(x).square().mean().backward()
        ref(x).square().mean().backward()
    bn, rbn = model[1], ref[1]
    torch.testing.assert_close(bn.running_mean, rbn.running_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(bn.running_var, rbn.running_var, rtol=1e-5, atol=1e-6)
    assert int(bn.num_batches_tracked) == int(rbn.num_batches_tracked) == 2
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        # the conv bias's gradient is ~0 (BatchNorm removes the bias): compared absolutely
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert cm.training_compile.failure is None
    rep = cm.explain(torch.randn(4, 3, 6, 6))
    assert not rep.fallbacks and rep.backward is not None and not rep.backward.fallbacks, str(rep)


def test_dropout_in_training_is_reproducible_and_its_backward_uses_the_forward_mask():
    """Dropout's mask comes from uniorch's random kernels seeded from torch's generator: the same
    manual_seed gives the same mask (not eager's bits: its CPU stream is another generator, as with
    torch.compile), the keep rate and scale are dropout's, and the gradient is the mask's."""
    cm = uniorch.compile(nn.Dropout(0.3), target="interpret")
    ones = torch.ones(400, 100, requires_grad=True)
    torch.manual_seed(1)
    y = cm(ones)
    y.sum().backward()
    keep = y != 0
    assert abs(keep.float().mean().item() - 0.7) < 0.01
    torch.testing.assert_close(y[keep], torch.full_like(y[keep], 1 / 0.7))
    torch.testing.assert_close(ones.grad, keep.float() / 0.7)
    torch.manual_seed(1)
    assert torch.equal(cm(ones).detach(), y.detach())
    torch.manual_seed(2)
    assert not torch.equal(cm(ones).detach(), y.detach())


class NoGradScale(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 2)

    def forward(self, x):
        h = torch.relu(self.a(x))
        with torch.no_grad():
            scale = h.abs().mean() + 1  # no gradient flows through the scale
        return self.b(h / scale)


def test_no_grad_region_inside_and_gradient_accumulation():
    torch.manual_seed(0)
    model = NoGradScale()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    gen = torch.Generator().manual_seed(11)
    for _ in range(3):  # gradients accumulate: no zero_grad between the steps
        x = torch.randn(5, 8, generator=gen)
        cm(x).sum().backward()
        ref(x).sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert _rel(p.grad, q.grad) <= 1e-4
    assert cm.training_compile.failure is None


class FrozenTeacher(nn.Module):
    """A frozen branch under inference_mode (a teacher, a target network) beside a trained one."""

    def __init__(self):
        super().__init__()
        self.teacher, self.student = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        with torch.inference_mode():
            target = self.teacher(x).relu()
        # inference tensors cannot be saved for backward in eager either: the clone is the user's
        return self.student(x).sigmoid() * target.clone()


def test_inference_mode_region_inside_and_around_a_compiled_training_model():
    torch.manual_seed(0)
    model = FrozenTeacher().train()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    gen = torch.Generator().manual_seed(12)
    for _ in range(2):
        x = torch.randn(5, 8, generator=gen)
        out, want = cm(x), ref(x)
        assert _rel(out.detach(), want.detach()) <= 1e-5
        out.square().sum().backward()
        want.square().sum().backward()
    assert model.teacher.weight.grad is None and ref.teacher.weight.grad is None
    for p, q in zip(model.student.parameters(), ref.student.parameters()):
        assert _rel(p.grad, q.grad) <= 1e-4
    assert cm.training_compile.failure is None and len(cm.training_compile.forward) == 1
    x = torch.randn(5, 8, generator=gen)
    with torch.inference_mode():  # the whole call in inference mode: no graph for autograd
        out = cm(x)
        assert out.is_inference() and not out.requires_grad
        assert _rel(out, ref(x)) <= 1e-5
    assert cm(x).requires_grad  # and training resumes after it


def test_bf16_autocast_training_with_fp32_master_weights_matches_eager():
    torch.manual_seed(0)
    model = MLP().train()
    ref, full = copy.deepcopy(model), copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    # SGD: Adam's normalised step turns a near-zero gradient's bf16 noise into a full lr-sized step
    opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, ref)]
    gen = torch.Generator().manual_seed(13)
    for step in range(3):
        x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
        for run, opt in zip((cm, ref), opts):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = run(x)
            assert out.dtype == torch.bfloat16
            torch.nn.functional.mse_loss(out.float(), y).backward()
        if step == 0:
            torch.nn.functional.mse_loss(full(x), y).backward()  # the same step in fp32
            for (name, p), q, f in zip(model.named_parameters(), ref.parameters(), full.parameters()):
                assert p.grad.dtype == torch.float32, name  # master weights and their grads stay fp32
                assert _rel(p.grad, q.grad) <= 1e-2, name
                # bf16 rounds at other points inside fused kernels: as close to fp32 as eager's bf16 is
                assert _rel(p.grad, f.grad) <= 2 * max(_rel(q.grad, f.grad), 1e-3), name
        for opt in opts:
            opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.dtype == torch.float32 and _rel(p, q) <= 1e-2, name
    with torch.autocast("cpu", dtype=torch.bfloat16):
        rep = cm.explain(torch.randn(8, 16))
    assert any("bf16" in k.compute_types for k in rep.kernels), str(rep)
    assert not rep.fallbacks and rep.backward is not None and not rep.backward.fallbacks, str(rep)


class Broken(nn.Module):
    """Two halves Dynamo cannot trace as one graph (a print between them, as logging in user code)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        torch._dynamo.graph_break()
        return self.b(h).relu()


def test_explain_reports_every_graph_of_a_training_call_split_by_a_graph_break():
    torch.manual_seed(0)
    model = Broken().train()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    x = torch.randn(6, 8)
    cm(x).square().sum().backward()
    ref(x).square().sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert _rel(p.grad, q.grad) <= 1e-4
    tc = cm.training_compile
    assert len(tc.forward) == 2 and len(tc.backward) == 2
    rep = cm.explain(x)
    halves = [tc.report(h) for h in tc.forward]
    assert len(rep.kernels) == sum(len(h.kernels) for h in halves) and rep.captured_ops == sum(h.captured_ops for h in halves)
    ops = {o.split(".")[1] for k in rep.kernels for o, _ in k.ops}
    assert {"tanh", "relu"} <= ops, ops  # both halves' ops, not only the last graph's
    assert len(rep.graph_breaks) == 1 and "graph_break" in rep.graph_breaks[0], rep.graph_breaks
    assert "graph breaks" in str(rep)
    assert rep.backward is not None and len(rep.backward.kernels) == sum(len(tc.report(h).kernels) for h in tc.backward)


class Dropouts(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.drop = nn.Linear(16, 16), nn.Dropout(0.3)

    def forward(self, x):
        return self.drop(torch.relu(self.fc(self.drop(x)))).sum(-1)


def test_fallback_random_draws_eagers_dropout_masks(monkeypatch):
    # kernels draw their own stream by default; UNIORCH_FALLBACK_RANDOM=1 leaves the draws to
    # PyTorch, in eager's order, so a compiled run with dropout equals eager's under one seed
    monkeypatch.setenv("UNIORCH_FALLBACK_RANDOM", "1")
    torch.manual_seed(0)
    model = Dropouts().train()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    gen = torch.Generator().manual_seed(14)
    for step in range(2):
        x = torch.randn(8, 16, generator=gen)
        torch.manual_seed(100 + step)
        out = cm(x)
        out.square().sum().backward()
        torch.manual_seed(100 + step)
        want = ref(x)
        want.square().sum().backward()
        assert _rel(out.detach(), want.detach()) <= 1e-5
    for p, q in zip(model.parameters(), ref.parameters()):
        assert _rel(p.grad, q.grad) <= 1e-4
    rep = cm.explain(x)
    assert rep.fallbacks and all("UNIORCH_FALLBACK_RANDOM" in f.why for f in rep.fallbacks)
    assert rep.kernels  # everything else still compiles


def test_many_models_of_one_class_each_compile_their_training_graphs():
    """Dynamo keeps 8 compiled frames per code object and runs the rest eagerly, silently; every
    nn.Sequential shares one forward. Ten of them each get forward and backward kernels."""
    for seed in range(10):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 3))
        ref = copy.deepcopy(model)
        cm = uniorch.compile(model, target="interpret")
        x = torch.randn(4, 6)
        cm(x).sum().backward()
        ref(x).sum().backward()
        assert cm.training_compile.failure is None and len(cm.training_compile.forward) == 1, seed
        assert len(cm.training_compile.backward) == 1, seed
        for p, q in zip(model.parameters(), ref.parameters()):
            assert _rel(p.grad, q.grad) <= 1e-4


def test_zoo_cnn_with_average_pooling_trains_with_its_backward_in_kernels():
    """cnn_bn_train (BatchNorm in training mode, avg_pool2d): avg_pool2d_backward has no lowering of
    its own and took the whole backward region to PyTorch; now every backward op is in a kernel.
    explain gives the activations the forward saves, beside eager autograd's."""
    from uniorch.testing import zoo

    model, args, _ = zoo.load("cnn_bn_train")
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (model, ref)]
    gen = torch.Generator().manual_seed(3)
    for _ in range(3):
        x = torch.randn(args[0].shape, generator=gen)
        for run, opt in ((cm, opts[0]), (ref, opts[1])):
            opt.zero_grad()
            run(x).pow(2).mean().backward()
            opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert _rel(p, q) <= 1e-4, name
    for (name, b), c in zip(model.named_buffers(), ref.buffers()):
        assert _rel(b.float(), c.float()) <= 1e-4, name
    rep = cm.explain(torch.randn(args[0].shape))
    assert rep.backward is not None and not rep.backward.fallbacks, str(rep.backward)
    assert rep.backward.compiled_fraction == 1.0
    assert 0 < rep.saved_bytes and 0 < rep.eager_saved_bytes
    assert "saved for backward" in str(rep)


def test_zoo_transformer_trains_like_eager_through_fused_cpu_attention():
    """nn.MultiheadAttention in training: AOTAutograd records PyTorch's fused CPU attention op, whose
    second output (log-sum-exp) the backward reads. PyTorch's decomposition returns the probabilities
    there; the backward then computed wrong gradients without a word. Gradients against eager."""
    from uniorch.testing import zoo

    model, args, _ = zoo.load("transformer_block")
    model.train()
    for m in model.modules():  # dropout's masks come from another generator order when compiled
        if isinstance(m, nn.MultiheadAttention):
            m.dropout = 0.0
        elif isinstance(m, nn.Dropout):
            m.p = 0.0
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    ids = torch.randint(0, 64, args[0].shape, generator=torch.Generator().manual_seed(5))
    for run in (cm, ref):
        run(ids)[0].pow(2).mean().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert _rel(p.grad, q.grad) <= 1e-4, name
    rep = cm.explain(ids)
    assert not rep.fallbacks and rep.backward is not None and rep.backward.compiled_fraction == 1.0


def test_zoo_sdpa_model_trains_like_eager_on_the_cpu_backend():
    """attention_sdpa (causal and additive-mask SDPA, k and v split off one projection) on `cpu`:
    the backward reads k and v as views with gaps, which the cpu lowering's load clamp cut short
    while the launcher sized each tensor by its element count (q.weight's gradient 1.45x off, with
    `interpret` exact). Gradients against eager."""
    from uniorch.testing import zoo

    model, args, _ = zoo.load("attention_sdpa")
    model.train()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="cpu")
    for run in (cm, ref):
        run(*args).pow(2).mean().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert _rel(p.grad, q.grad) <= 1e-4, name


class SplitAttention(nn.Module):
    """GPT-2's attention: q, k and v split off one projection (strided slices of it in eager)."""

    def __init__(self, d=32, h=2):
        super().__init__()
        self.qkv, self.proj, self.h = nn.Linear(d, 3 * d), nn.Linear(d, d), h

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


def test_saved_activations_leave_the_forward_as_written(monkeypatch):
    """q, k and v are saved for the backward as the forward's kernels wrote them: no copy into a
    storage of eager's layout per call (each was three kernels over the whole projection's extent,
    0.53 ms of `arange` per GPT-2 training step on the H200); the gradients are eager's."""
    import sys

    from uniorch.capture import CapturedGraph

    graph = sys.modules[CapturedGraph.__module__]
    calls = []
    real = graph.laid_out
    monkeypatch.setattr(graph, "laid_out", lambda v, layout: calls.append(layout) or real(v, layout))
    torch.manual_seed(0)
    model = SplitAttention()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    for step in range(2):
        x = torch.randn(2, 8, 32)
        calls.clear()
        cm(x).pow(2).mean().backward()
        ref(x).pow(2).mean().backward()
        for p, r in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, r.grad, rtol=1e-4, atol=1e-5)
    assert calls == [], calls  # the second step: no output of the forward was laid out anew


def test_training_halves_and_the_optimizer_skip_fx_per_call():
    """Each compiled half of a training step, and the optimizer's update, is one region that also
    returns some inputs (saved for the backward) or None (no gradient): it is called without FX's
    generated forward, and an optimizer's lists of tensors find their compile without pytree."""
    from uniorch.runtime.partition import _one_region_call

    torch.manual_seed(0)
    model = SplitAttention()
    cm = uniorch.compile(model, target="interpret")
    opt = uniorch.compile(torch.optim.AdamW(model.parameters(), lr=1e-3), target="interpret")
    for _ in range(2):
        opt.zero_grad()
        cm(torch.randn(2, 8, 32)).pow(2).mean().backward()
        opt.step()
    halves = cm.training_compile.forward + cm.training_compile.backward + [opt._last[0]]
    programs = [e.program for h in halves for e in h._cache.values()]
    assert len(programs) == 3 and all(_one_region_call(p.module) is not None for p in programs)
    assert all(len(h._spec_memo) == 1 for h in halves)  # found by the memoized key, not pytree's



class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.drop = nn.Linear(16, 48), nn.Dropout(0.0)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 4, 3, 2, 8).permute(2, 0, 3, 1, 4)
        # dropout_p=0, as transformers' attention passes in training mode when its dropout is 0
        a = nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=True)
        return self.drop(a.transpose(1, 2).reshape(2, 4, 16))


class Checkpointed(nn.Module):
    """Activation checkpointing, as `model.gradient_checkpointing_enable()` does in transformers."""

    def __init__(self, reentrant: bool):
        super().__init__()
        self.blocks = nn.ModuleList(Attention() for _ in range(2))
        self.reentrant = reentrant

    def forward(self, x):
        for block in self.blocks:
            x = x + torch.utils.checkpoint.checkpoint(block, x, use_reentrant=self.reentrant)
        return x


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_trains_like_eager(reentrant):
    # the recompute replays the forward's RNG state, and the backward graph held its size as a
    # SymInt of constant value: compiling it failed ("SymIntArrayRef expected to contain only
    # concrete integers")
    torch.manual_seed(5)
    model = Checkpointed(reentrant)
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    for step in range(2):
        # requiring grad, as an embedding's output does: reentrant checkpointing of inputs that do
        # not leaves its parameters without gradients in eager
        x = torch.randn(2, 4, 16, requires_grad=True)
        for m, run in ((model, cm), (ref, ref)):
            m.zero_grad()
            run(x).square().mean().backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            assert _rel(p.grad, q.grad) <= 1e-4, (step, name)
    assert cm.training_compile.failure is None and cm.training_compile.backward


def test_a_graph_uniorch_fails_to_compile_runs_in_pytorch_and_explain_says_so(monkeypatch):
    import uniorch.runtime.training as training

    real = training._compile_now

    def fail_backward(cm, *args):
        if cm.kernel_prefix.startswith("bw"):
            raise RuntimeError("a bug of ours")
        return real(cm, *args)

    monkeypatch.setattr(training, "_compile_now", fail_backward)
    torch.manual_seed(6)
    model = MLP()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    with pytest.warns(RuntimeWarning, match="a backward graph runs in PyTorch"):
        got = _train(model, cm, 2, seed=7)
    assert got == pytest.approx(_train(ref, ref, 2, seed=7), rel=1e-4)
    rep = cm.explain(torch.randn(8, 16))
    assert rep.kernels and rep.eager_graphs == [
        "a backward graph runs in PyTorch (compiling it failed: RuntimeError: a bug of ours)"]
    assert "graphs run by PyTorch" in str(rep)
    with pytest.raises(RuntimeError, match="a bug of ours"):
        strict = uniorch.compile(copy.deepcopy(ref), target="interpret", fallback="error")
        strict(torch.randn(8, 16)).sum().backward()


def test_training_over_varying_batch_sizes_compiles_each_half_twice_and_matches_eager():
    # Dynamo traced each new batch size as its own static graph, and after eight it ran the model
    # eagerly for good; now the second size makes the sizes symbolic (as torch.compile's automatic
    # dynamic), and the halves take them from their tensors (runtime/symbolic_halves.py)
    torch.manual_seed(8)
    model = MLP()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref)]
    for batch in (8, 9, 13, 2, 21, 11, 30, 5, 17, 6):
        x, y = torch.randn(batch, 16), torch.randn(batch, 4)
        for (m, run), opt in zip(((model, cm), (ref, ref)), opts):
            opt.zero_grad()
            torch.nn.functional.mse_loss(run(x), y).backward()
            opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert _rel(p, q) <= 1e-4, name
    tc = cm.training_compile
    assert tc.failure is None and len(tc.forward) == len(tc.backward) == 2
    for half in (tc.forward[1], tc.backward[1]):  # the symbolic graphs: one uniorch compile each
        assert half.cache_size == 1 and half._symbolic, half.recompiles
    rep = cm.explain(torch.randn(7, 16))
    assert rep.symbolic and not rep.fallbacks and rep.backward.symbolic and not rep.backward.fallbacks, str(rep)


def test_explain_of_a_training_call_leaves_the_model_as_it_was():
    """explain counts what eager autograd would save by running the model once: a forward that
    writes its own weights in place (rescaling under no_grad, an EMA buffer) had them written twice, so the weights moved away from eager's."""

    class Writes(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)
            self.register_buffer("ema", torch.zeros(8))

        def forward(self, x):
            y = self.lin(x)
            with torch.no_grad():
                self.lin.weight.mul_(0.5)
                self.ema.mul_(0.9).add_(y.mean(0), alpha=0.1)
            return y

    torch.manual_seed(0)
    model = Writes()
    cm = uniorch.compile(model)
    x = torch.randn(4, 8)
    cm(x.clone()).sum().backward()
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    report = cm.explain(x)
    assert report.eager_saved_bytes is not None
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k
