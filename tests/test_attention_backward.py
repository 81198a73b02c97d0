"""Attention's backward in training, FlashAttention's way: dQ from the scores, dK and dV from the
transposed scores, each product's first factor computed tile by tile in a chain kernel
(capture/fused_attention.py for SDPA, runtime/attention_transpose.py for written-out attention,
passes/recompute_hidden.py). Gradients against eager on fresh inputs; no backward kernel stores
a T x T tensor."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch


def _rel(a, b):
    return float((a.float() - b.float()).abs().max() / b.float().abs().max())


class _Sdpa(nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **self.kwargs)


class _Manual(nn.Module):
    """Written-out causal attention, nanoGPT's without flash (mask from a buffer)."""

    def __init__(self, t):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(t, t)).view(1, 1, t, t))

    def forward(self, q, k, v):
        t = q.shape[-2]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        return F.softmax(att, dim=-1) @ v


def _check(model, q, k, v, *extra, tol=1e-5, dtype=None):
    """Trains one step compiled and eagerly on the same inputs; returns the compiled backward's
    report after checking the gradients and that no backward kernel stores a T x T tensor."""
    cm = uniorch.compile(model, target="interpret")
    g = torch.randn(q.shape, dtype=q.dtype)
    ins = [z.clone().requires_grad_(True) for z in (q, k, v)]
    cm(*ins, *extra).backward(g)
    ref = [z.clone().requires_grad_(True) for z in (q, k, v)]
    model(*ref, *extra).backward(g)
    if dtype is None:
        for a, r in zip(ins, ref):
            assert _rel(a.grad, r.grad) <= tol
    else:  # 16-bit: no farther from float64 than eager's own gradients
        exact = [z.double().requires_grad_(True) for z in (q, k, v)]
        model.double()(*exact, *[e.double() if e.is_floating_point() else e for e in extra]).backward(g.double())
        for a, r, e in zip(ins, ref, exact):
            assert _rel(a.grad, e.grad) <= 2 * _rel(r.grad, e.grad) + 1e-3
    with torch.enable_grad():
        rep = cm.explain(*ins, *extra)
    scores = q.shape[0] * q.shape[1] * q.shape[-2] * k.shape[-2]  # elements
    assert [kern.kind for kern in rep.backward.kernels].count("chain") == 3, str(rep.backward)
    for kern in rep.backward.kernels:  # not even a 16-bit T x T tensor (T x d ones are < a quarter of it)
        assert kern.bytes_written < 2 * scores, str(rep.backward)
    assert not rep.backward.fallbacks
    return rep.backward


@pytest.mark.parametrize("case", ["causal", "padding", "additive", "gqa", "cross"])
def test_sdpa_backward_is_three_chains(case):
    torch.manual_seed(hash(case) % 1000)
    b, h, t, d = 2, 2, 96, 16
    q, k, v = (torch.randn(b, h, t, d) for _ in range(3))
    extra = ()
    if case == "causal":
        model = _Sdpa(is_causal=True)
    elif case == "padding":  # keys past each sequence's length masked
        lengths = torch.tensor([96, 70])
        extra = ((torch.arange(t)[None, :] < lengths[:, None])[:, None, None, :],)
        model = _Sdpa()
    elif case == "additive":  # a T x T float bias
        extra = (torch.randn(t, t),)
        model = _Sdpa()
    elif case == "gqa":  # 4 query heads over 2 key/value heads
        q = torch.randn(b, 4, t, d)
        model = _Sdpa(is_causal=True, enable_gqa=True)
    else:  # 64 queries over 128 keys
        q, k, v = torch.randn(b, h, 64, d), torch.randn(b, h, 128, d), torch.randn(b, h, 128, d)
        model = _Sdpa()
    _check(model, q, k, v, *extra)


def test_written_out_attention_backward_is_three_chains():
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 3, 80, 16) for _ in range(3))
    _check(_Manual(128), q, k, v)


@pytest.mark.parametrize("form", ["sdpa", "manual"])
def test_bf16_attention_backward_is_three_chains(form):
    torch.manual_seed(3)
    q, k, v = (torch.randn(2, 2, 96, 16, dtype=torch.bfloat16) for _ in range(3))
    model = _Sdpa(is_causal=True) if form == "sdpa" else _Manual(96)
    _check(model, q, k, v, dtype=torch.bfloat16)


def test_written_out_grouped_query_attention_trains_as_eager():
    """transformers' Llama eager attention (k and v heads repeated): gradients as eager's."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   attn_implementation="eager")
    torch.manual_seed(4)
    model = transformers.LlamaModel(cfg).train()
    ids = torch.randint(0, 64, (2, 72))
    cm = uniorch.compile(model, target="interpret")
    cm(input_ids=ids).last_hidden_state.pow(2).mean().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model(input_ids=ids).last_hidden_state.pow(2).mean().backward()
    for n, p in model.named_parameters():
        assert _rel(got[n], p.grad) <= 1e-4, n


class _SdpaBackwardOp(nn.Module):
    """SDPA's CPU backward op, causal, as a training backward records it."""

    def forward(self, grad_out, q, k, v, out, lse):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(grad_out, q, k, v, out, lse,
                                                                                   0.0, True)


def test_causal_backward_chains_skip_the_far_side_of_the_diagonal_and_compute_what_eager_does():
    """dQ's hidden loop (keys) ends at the query tile's diagonal, dK's and dV's (queries) begin at
    the key tile's (codegen/causal_bound.py `zero_band`); the GPU kernels, bounds and all, run on
    Triton's interpreter against eager's backward (the `interpret` target itself visits every tile:
    Triton 3.6's interpreter needs integer loop bounds)."""
    import triton

    from uniorch.backends.triton_launch import TritonLauncher
    from uniorch.codegen import generate
    from uniorch.runtime import loader

    if tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7):
        pytest.skip("Triton's interpreter before 3.7 needs integer loop bounds")

    def inputs(seed):
        torch.manual_seed(seed)
        q, k, v, g = (torch.randn(1, 2, 160, 64) for _ in range(4))
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)[:2]
        return g, q, k, v, out, lse

    cm = uniorch.compile(_SdpaBackwardOp(), target="interpret")
    cm(*inputs(0))
    regions = [r for e in cm._cache.values() for r in e.program.regions]
    chains = [x for r in regions for x in r.plan.kernels.values() if x.source.name.endswith("chain")]
    assert len(chains) == 3
    starts = stops = 0
    for kernel in chains:
        gpu = generate(kernel.func_op, "cuda:sm_90")
        starts += "range(tl.maximum(pid_m * BLOCK_M - 0, 0) // BLOCK_N * BLOCK_N, 160, BLOCK_N)" in gpu.source
        stops += "range(0, tl.minimum(160, pid_m * BLOCK_M + BLOCK_M + 0), BLOCK_N)" in gpu.source
        kernel.source, kernel.fn = gpu, TritonLauncher(gpu, loader.load(gpu, interpret=True))
    assert (starts, stops) == (2, 1)
    args = inputs(1)
    want = _SdpaBackwardOp()(*args)
    for got, ref in zip(cm(*args), want):
        assert _rel(got, ref) <= 1e-5


def test_t5_encoder_with_relative_position_bias_trains_as_eager():
    """T5's eager attention adds a bias computed from a parameter (the relative position
    embedding), without scaling: its gradient flows through dS. The loss projects the output on fixed random weights (a mean square after
    T5's final RMSNorm, at unit weight, hardly depends on its input: its gradients are noise)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.T5Config(vocab_size=64, d_model=64, d_kv=16, d_ff=96, num_layers=1, num_heads=4,
                                dropout_rate=0.0, attn_implementation="eager")
    torch.manual_seed(6)
    model = transformers.T5EncoderModel(cfg).train()
    ids, probe = torch.randint(0, 64, (2, 40)), torch.randn(2, 40, 64)
    model(input_ids=ids).last_hidden_state.mul(probe).sum().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    cm = uniorch.compile(model, target="interpret")
    cm(input_ids=ids).last_hidden_state.mul(probe).sum().backward()
    for n, p in model.named_parameters():
        assert _rel(p.grad, want[n]) <= 1e-4, n
