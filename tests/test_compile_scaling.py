"""The front end's work grows with a model's depth, not with its square (docs/design.md, compile
time). Timing would be a flaky test; the work is counted instead, at 4 and 16 layers of tiny
transformers configs: the ops fusion's cycle checks walk past the group (a group that cloned a
shared fill spanned the model from it), the ops fuse-chain's "computed from" walks visit (each
walked the whole decoder), and fuse-siblings' prologue comparisons (every layer's norm against
every other's). Each per layer at 16 layers may be at most twice its value per layer at 4 layers
(quadratic work is 4x)."""
from __future__ import annotations

import pytest
import torch

import uniorch.codegen.attention as attention
import uniorch.passes.fuse_graph as fuse_graph
import uniorch.passes.fuse_siblings as fuse_siblings
from uniorch.api import explain_static

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")


def _gpt2(layers: int):
    cfg = transformers.GPT2Config(vocab_size=96, n_embd=32, n_layer=layers, n_head=4, n_positions=64)
    return transformers.GPT2LMHeadModel(cfg).eval(), {"use_cache": False}


def _llama(layers: int):  # default settings: KV cache returned, gated MLP (fuse-chain's `up` product)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return transformers.LlamaForCausalLM(cfg).eval(), {}


def _work(make, layers: int, monkeypatch) -> dict:
    counts = {"walked past the group": 0, "chain walk": 0, "prologue comparisons": 0}
    bound, as_op, same = fuse_graph.DependencyGraph._return_bound, attention._as_op, fuse_siblings._same_prologue

    def counted_bound(self, inside, g):
        b = bound(self, inside, g)
        known = [p for p in (self._index.get(o) for o in inside) if p is not None]
        counts["walked past the group"] += b - max(known) if known else 0
        return b

    def counted_op(x):
        counts["chain walk"] += 1
        return as_op(x)

    def counted_same(*args):
        counts["prologue comparisons"] += 1
        return same(*args)

    monkeypatch.setattr(fuse_siblings, "_same_prologue", counted_same)
    monkeypatch.setattr(fuse_graph.DependencyGraph, "_return_bound", counted_bound)
    monkeypatch.setattr(attention, "_as_op", counted_op)
    torch.manual_seed(0)
    model, kwargs = make(layers)
    with torch.no_grad():
        explain_static(model, (torch.randint(0, 96, (1, 8)),), kwargs, target="cuda:sm_90")
    monkeypatch.undo()
    return counts


@pytest.mark.parametrize("make", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_fusion_work_per_layer_does_not_grow_with_depth(make, monkeypatch):
    small, deep = _work(make, 4, monkeypatch), _work(make, 16, monkeypatch)
    for what in small:
        per_layer_small, per_layer_deep = small[what] / 4, deep[what] / 16
        assert per_layer_deep <= 2 * per_layer_small + 2, (what, small[what], deep[what])
