"""transformers' Mistral in default settings (SDPA, a sliding-window mask, grouped-query heads):
each layer's attention is one flash kernel. The mask's one head, a view of unit dims, is added to
scores computed over (kv head, repeat); passes/sink_collapse.py sinks the scores' collapse past it
(it stopped there, and q·kᵀ, the softmax and P·v were three kernels writing the T x T scores).
Logits and the cache against eager on fresh inputs."""
import pytest
import torch
import torch.utils._pytree as pytree

import uniorch

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")


def test_mistral_sliding_window_attention_is_flash():
    torch.manual_seed(0)
    config = transformers.MistralConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                        sliding_window=4)
    model = transformers.MistralForCausalLM(config).eval()
    cm = uniorch.compile(model, target="interpret")
    ids = torch.randint(0, 96, (2, 8))
    rep = cm.explain(ids)
    assert not rep.fallbacks, str(rep)
    assert [k.kind for k in rep.kernels].count("attention") == 2, str(rep)
    assert all(k.kind == "attention" for k in rep.kernels if any("softmax" in op for op, _ in k.ops)), str(rep)
    for _ in range(2):
        ids = torch.randint(0, 96, (2, 8))
        got = cm(ids)
        with torch.no_grad():
            want = model(ids)
        torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-5)
        for g, w in zip(pytree.tree_leaves(got.past_key_values), pytree.tree_leaves(want.past_key_values)):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
