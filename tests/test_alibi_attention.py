"""transformers' Bloom in default settings (ALiBi biases added by `baddbmm`, the cache on): each
layer's attention is one flash kernel. Bloom computes its scores over (batch x heads) and views
them as (batch, heads) for the mask; after the scores' batch loop was split, that view was a merge
split again, which the attention fusion could not see through (passes/sink_collapse.py `_swap`
now composes such a pair: q·kᵀ, the softmax and P·v were three kernels writing the T x T scores).
Logits and the cache against eager on fresh inputs, with left padding."""
import pytest
import torch
import torch.utils._pytree as pytree

import uniorch

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_bloom_alibi_attention_is_flash(dtype, tol):
    torch.manual_seed(0)
    config = transformers.BloomConfig(vocab_size=96, hidden_size=32, n_layer=2, n_head=4)
    model = transformers.BloomForCausalLM(config).eval().to(dtype)
    cm = uniorch.compile(model, target="interpret")
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, :3] = 0  # left padding: the mask's -inf keys ride with the ALiBi bias
    ids = torch.randint(0, 96, (2, 8))
    rep = cm.explain(ids, attention_mask=mask)
    assert not rep.fallbacks, str(rep)
    assert [k.kind for k in rep.kernels].count("attention") == 2, str(rep)
    assert all(k.kind == "attention" for k in rep.kernels if any("softmax" in op for op, _ in k.ops)), str(rep)
    for _ in range(2):
        ids = torch.randint(0, 96, (2, 8))
        got = cm(ids, attention_mask=mask)
        with torch.no_grad():
            want = model(ids, attention_mask=mask)
        scale = want.logits.float().abs().max()
        assert ((got.logits.float() - want.logits.float()).abs().max() / scale).item() <= tol
        leaves = pytree.tree_leaves(want.past_key_values)
        assert leaves and len(pytree.tree_leaves(got.past_key_values)) == len(leaves)
        for g, w in zip(pytree.tree_leaves(got.past_key_values), leaves):
            assert ((g.float() - w.float()).abs().max() / w.float().abs().max()).item() <= tol
