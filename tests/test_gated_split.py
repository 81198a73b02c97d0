"""A fused gate/up projection chunked in two (Phi-3's MLP) is split at capture into two products
of the same input (capture/gated_split.py), which become one gated kernel: the 2 x hidden
product is no longer written and read back. Against eager on fresh inputs; bytes against the
same model with the rewrite switched off."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch import nn

import uniorch
from uniorch.api import explain_static
from uniorch.capture import gated_split, trace
from uniorch.passes import preprocess


class FusedGateUp(nn.Module):
    def __init__(self, dim=64, hidden=96, bias=False, act=F.silu):
        super().__init__()
        self.gate_up = nn.Linear(dim, 2 * hidden, bias=bias)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.act = act

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(up * self.act(gate))


def _bytes(rep) -> int:
    return sum(k.bytes_read + k.bytes_written for k in rep.kernels)


def _unsplit(monkeypatch):
    # both the capture rewrite and its MLIR counterpart (a product read in slices, passes/split_products.py)
    monkeypatch.setattr(trace, "split_gated_projections", lambda gm: 0)
    monkeypatch.setattr(preprocess, "split_sliced_products", lambda func_op: 0)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("act", [F.silu, F.gelu], ids=["silu", "gelu"])
def test_phi3_mlp_is_one_gated_kernel(monkeypatch, bias, act):
    model = FusedGateUp(bias=bias, act=act).eval()
    x = torch.randn(3, 7, 64)
    with torch.no_grad():
        torch.testing.assert_close(uniorch.compile(model, target="interpret")(x), model(x), rtol=1e-5, atol=1e-5)
    split = explain_static(model, (x,), target="interpret")
    _unsplit(monkeypatch)
    fused = explain_static(model, (x,), target="interpret")
    assert not split.fallbacks and len(split.kernels) < len(fused.kernels)
    # the 2 x hidden product, written and read once, is what no longer moves
    rows, hidden = 3 * 7, 96
    assert _bytes(fused) - _bytes(split) >= 2 * rows * 2 * hidden * 4 - rows * hidden * 4


def test_transformers_phi3_default_settings(monkeypatch):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.Phi3Config(vocab_size=96, hidden_size=320, intermediate_size=864, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                  pad_token_id=0)
    model = transformers.Phi3ForCausalLM(cfg).eval()
    ids = torch.randint(1, 96, (2, 12))
    with torch.no_grad():
        out = uniorch.compile(model, target="interpret")(ids).logits
        torch.testing.assert_close(out, model(ids).logits, rtol=1e-4, atol=1e-4)
    split = explain_static(model, (ids,), target="interpret")
    _unsplit(monkeypatch)
    fused = explain_static(model, (ids,), target="interpret")
    # a kernel less per layer from the gated MLP (and one more from q, k and v sliced off qkv_proj)
    assert not split.fallbacks and len(split.kernels) <= len(fused.kernels) - cfg.num_hidden_layers
    assert _bytes(fused) - _bytes(split) >= cfg.num_hidden_layers * 24 * 864 * 4


def test_a_split_in_three_or_without_a_gate_stays_one_product():
    class QKV(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(32, 96)

        def forward(self, x):
            q, k, v = self.qkv(x).split(32, dim=-1)
            return q * k + v

    class Halves(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(32, 64)

        def forward(self, x):
            a, b = self.proj(x).chunk(2, dim=-1)
            return torch.cat([a.relu(), b.sin()], -1)  # no product of the two halves

    for model in (QKV().eval(), Halves().eval()):
        x = torch.randn(5, 32)
        cg = trace.capture(model, (x,))
        assert gated_split.split_gated_projections(cg.graph_module) == 0
        mms = [n for n in cg.graph_module.graph.nodes if n.target in (torch.ops.aten.mm.default,
                                                                      torch.ops.aten.addmm.default)]
        assert len(mms) == 1
        with torch.no_grad():
            torch.testing.assert_close(uniorch.compile(model, target="interpret")(x), model(x))


def test_symbolic_lengths_and_training():
    model = FusedGateUp(bias=True)
    cm = uniorch.compile(model, target="interpret", dynamic=True)
    with torch.no_grad():
        for t in (5, 11):
            x = torch.randn(2, t, 64)
            torch.testing.assert_close(cm(x), model(x), rtol=1e-5, atol=1e-5)
    ref = FusedGateUp(bias=True)
    ref.load_state_dict(model.state_dict())
    x = torch.randn(2, 6, 64)
    cm = uniorch.compile(model.train(), target="interpret")
    cm(x).square().mean().backward()
    ref.train()(x).square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)


def test_gpt2_fused_qkv_with_a_cache_is_a_product_per_part(monkeypatch):
    # GPT-2's c_attn computes q, k and v as one product split in three; with the cache on, k and v
    # are returned transposed to (batch, heads, tokens, dim), which a kernel of its own copied out
    # of the fused output every layer. Split at capture, the k and v products store the cache's
    # layout from their epilogues (as sibling products of one kernel at this width).
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    cm = uniorch.compile(model, target="interpret")
    for _ in range(2):
        ids = torch.randint(0, 96, (2, 8))
        with torch.no_grad():
            got, want = cm(ids), model(ids)
        torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-5)
        for g, w in zip(pytree.tree_leaves(got.past_key_values), pytree.tree_leaves(want.past_key_values)):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    split = explain_static(model, (ids,), target="interpret")
    _unsplit(monkeypatch)
    fused = explain_static(model, (ids,), target="interpret")
    copies = lambda rep: [k for k in rep.kernels if {op for op, _ in k.ops} <= {"aten.permute.default"}]  # noqa: E731
    assert copies(fused) and not copies(split), str(split)
    assert not split.fallbacks and len(split.kernels) < len(fused.kernels)
    assert _bytes(split) < _bytes(fused)
    # without the cache nothing is returned: the product stays whole
    cg = trace.capture(model, (ids,), {"use_cache": False})
    mms = [n for n in cg.graph_module.graph.nodes if n.target is torch.ops.aten.mm.default]
    assert len(mms) == 2 * 4 + 1  # per layer c_attn, c_proj, c_fc, mlp c_proj; the tied lm_head
