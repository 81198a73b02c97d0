"""Written-out attention in training (runtime/attention_recompute.py): the forward saves no T x T
probabilities and is one flash kernel, the backward recomputes them; gradients as eager's on fresh
inputs. Where the rewrite does not apply (dropout, returned weights) the graph stays as it was."""
import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch


class NanoGPTAttention(nn.Module):
    """nanoGPT's CausalSelfAttention on its path without flash attention."""

    def __init__(self, dim=32, heads=2, block=64, dropout=0.0):
        super().__init__()
        self.c_attn, self.c_proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.attn_dropout = nn.Dropout(dropout)
        self.n_head = heads
        self.register_buffer("bias", torch.tril(torch.ones(block, block)).view(1, 1, block, block))

    def forward(self, x, return_weights=False):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = self.c_proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))
        return (y, att) if return_weights else y


class EagerHFAttention(nn.Module):
    """transformers' eager attention: additive mask, softmax in float32, back to the model's type."""

    def forward(self, q, k, v, mask):
        w = torch.matmul(q, k.transpose(2, 3)) * q.shape[-1] ** -0.5 + mask
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(w, v)


def _rel(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


def _saved_shapes(model, *args) -> list:
    """The shapes of the forward's outputs under the training path's partition: what it returns
    and what it saves for the backward."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    from uniorch.runtime.training import partition

    shapes = []

    def forward(gm, _):
        out = next(n for n in gm.graph.nodes if n.op == "output")
        shapes.extend(tuple(a.meta["val"].shape) for a in out.args[0] if isinstance(a, torch.fx.Node))
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=forward, bw_compiler=lambda gm, _: make_boxed_func(gm.forward),
                           partition_fn=partition)
    out = torch.compile(model, backend=backend)(*args)
    (out[0] if isinstance(out, tuple) else out).float().pow(2).mean().backward()
    torch._dynamo.reset()
    return shapes


def _compiled_nanogpt(seed: int):
    """(model, an eager copy with the same weights, the model compiled)."""
    torch.manual_seed(seed)
    model = NanoGPTAttention().train()
    return model, copy.deepcopy(model), uniorch.compile(model, target="interpret")


def _grads(fn, model, x):
    x = x.clone().requires_grad_(True)
    fn(x).pow(2).mean().backward()
    return [x.grad] + [p.grad for p in model.parameters()]


def test_nanogpt_attention_trains_with_one_flash_kernel_and_no_saved_probabilities():
    model, ref, cm = _compiled_nanogpt(0)
    x = torch.randn(2, 48, 32)
    got, want = _grads(cm, model, x), _grads(ref, ref, x)
    for g, w in zip(got, want):
        assert _rel(g, w) <= 1e-5
    with torch.enable_grad():
        rep = cm.explain(x.requires_grad_(True))
    assert [k.kind for k in rep.kernels].count("attention") == 1, str(rep)
    # eager saves P (2 x 2 x 48 x 48); the forward here saves q, k, v, the output and its
    # log-sum-exp: T x d tensors and a row
    assert rep.saved_bytes < rep.eager_saved_bytes, (rep.saved_bytes, rep.eager_saved_bytes)
    assert (2, 2, 48, 48) not in _saved_shapes(NanoGPTAttention().train(), x.clone().requires_grad_(True))
    assert not rep.fallbacks and not rep.backward.fallbacks


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_eager_attention_with_float32_softmax_trains_as_eager(dtype):
    torch.manual_seed(1)
    b, h, t, d = 2, 2, 40, 16
    q, k, v = (torch.randn(b, h, t, d, dtype=dtype) for _ in range(3))
    mask = torch.zeros(b, 1, t, t, dtype=dtype).masked_fill(torch.ones(t, t).triu(1).bool(), -1e4)
    leaves = [z.clone().requires_grad_(True) for z in (q, k, v)]
    assert (b, h, t, t) not in _saved_shapes(EagerHFAttention(), *leaves, mask)
    cm = uniorch.compile(EagerHFAttention(), target="interpret")

    def grads(fn):
        ins = [z.clone().requires_grad_(True) for z in (q, k, v)]
        fn(*ins, mask).float().pow(2).mean().backward()
        return [z.grad for z in ins]

    got, want = grads(cm), grads(EagerHFAttention())
    exact = [z.double().requires_grad_(True) for z in (q, k, v)]
    EagerHFAttention()(*exact, mask.double()).pow(2).mean().backward()
    for g, w, e in zip(got, want, exact):
        # no farther from float64 than eager's own 16-bit gradients
        assert _rel(g, e.grad) <= 2 * _rel(w, e.grad) + 1e-3


def test_dropout_and_returned_weights_keep_the_saved_probabilities():
    torch.manual_seed(2)
    x = torch.randn(2, 16, 32, requires_grad=True)
    # the probabilities (or dropout's mask on them) stay saved where the rewrite does not apply
    assert (2, 2, 16, 16) not in _saved_shapes(NanoGPTAttention().train(), x)
    assert (2, 2, 16, 16) in _saved_shapes(NanoGPTAttention(dropout=0.1).train(), x)
    assert _saved_shapes(NanoGPTAttention().train(), x, True).count((2, 2, 16, 16)) >= 2


def test_returned_weights_train_as_eager():
    model, ref, cm = _compiled_nanogpt(3)
    x = torch.randn(2, 24, 32)

    def grad_of_input(fn):
        xi = x.clone().requires_grad_(True)
        y, att = fn(xi, True)
        (y.pow(2).mean() + att.pow(2).sum()).backward()
        return xi.grad

    assert _rel(grad_of_input(cm), grad_of_input(ref)) <= 1e-5
    for p, q in zip(model.parameters(), ref.parameters()):
        assert _rel(p.grad, q.grad) <= 1e-5


def test_transformers_gpt2_with_eager_attention_trains_with_flash_forward_kernels():
    import transformers  # a test dependency (pyproject.toml): never skipped
    torch.manual_seed(4)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=64, vocab_size=100,
                                     attn_implementation="eager", bos_token_id=0, eos_token_id=0,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2Model(config).train()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    ids = torch.randint(0, 100, (2, 24))
    cm(input_ids=ids).last_hidden_state.pow(2).mean().backward()
    ref(input_ids=ids).last_hidden_state.pow(2).mean().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        if q.grad is not None:
            assert _rel(p.grad, q.grad) <= 1e-4, name
    with torch.enable_grad():
        rep = cm.explain(input_ids=ids)
    assert [k.kind for k in rep.kernels].count("attention") == config.n_layer, str(rep)
    assert not rep.fallbacks and not rep.backward.fallbacks


class _CausalAttention(nn.Module):
    def __init__(self, sdpa: bool):
        super().__init__()
        self.sdpa = sdpa

    def forward(self, q, k, v):
        if self.sdpa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        t = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        return F.softmax(att, dim=-1) @ v


@pytest.mark.parametrize("sdpa", [False, True])
def test_causal_attention_backward_writes_no_scores(sdpa):
    """The forward returns the scores' log-sum-exp from its flash kernel; the backward computes
    dQ from the scores and dK, dV from the transposed scores, each product's first factor in
    registers (FlashAttention's backward, as chains): no backward kernel writes or reads a T x T
    tensor of floats, for SDPA's CPU backward and for the written-out form alike."""
    torch.manual_seed(5)
    b, h, t, d = 1, 2, 256, 16
    q, k, v = (torch.randn(b, h, t, d) for _ in range(3))
    cm = uniorch.compile(_CausalAttention(sdpa), target="interpret")
    ins = [z.clone().requires_grad_(True) for z in (q, k, v)]
    g = torch.randn(b, h, t, d)
    cm(*ins).backward(g)
    ref = [z.clone().requires_grad_(True) for z in (q, k, v)]
    _CausalAttention(sdpa)(*ref).backward(g)
    for a, r in zip(ins, ref):
        assert _rel(a.grad, r.grad) <= 1e-5
    with torch.enable_grad():
        rep = cm.explain(*ins)
    assert [k.kind for k in rep.kernels].count("attention") == 1, str(rep)
    scores = b * h * t * t * 4
    assert [k.kind for k in rep.backward.kernels].count("chain") == 3, str(rep.backward)
    for kern in rep.backward.kernels:
        # the written-out form's boolean mask (t x t bytes) is the model's own tensor
        assert kern.bytes_written < scores / 8 and kern.bytes_read < scores / 2, str(rep.backward)
