"""`flex_attention` compiles (capture/flex_math.py): its score_mod and mask_mod are written out
over the index grid, and the attention is one flash kernel where they are elementwise in the
indices. Against eager on fresh inputs: causal and sliding-window block masks, a document mask
and an ALiBi bias reading tensors of the model's, grouped-query heads, bf16, log-sum-exp returned,
transformers' Llama with attn_implementation="flex_attention"."""
import copy

import pytest
import torch
from torch import nn

import uniorch

flex = pytest.importorskip("torch.nn.attention.flex_attention")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

B, H, T, D = 2, 4, 24, 16  # T is no multiple of a 16-row tile


def _causal(b, h, q, kv):
    return q >= kv


def _window(b, h, q, kv):
    return (q >= kv) & (q - kv < 5)


def _scaled(score, b, h, q, kv):
    return score * 0.5 + (q - kv) * 0.01


class _Flex(nn.Module):
    """flex_attention as a model calls it: a block mask built in forward, buffers read by the mods."""

    def __init__(self, case: str):
        super().__init__()
        self.case = case
        self.register_buffer("slopes", torch.linspace(0.1, 0.8, H))
        self.register_buffer("doc", torch.tensor([0] * 10 + [1] * 8 + [2] * 6))

    def forward(self, q, k, v):
        n = q.shape[-2]
        if self.case == "causal":
            mask = flex.create_block_mask(_causal, None, None, n, n, device=q.device)
            return flex.flex_attention(q, k, v, block_mask=mask)
        if self.case == "window_score":
            mask = flex.create_block_mask(_window, None, None, n, n, device=q.device)
            return flex.flex_attention(q, k, v, score_mod=_scaled, block_mask=mask)
        if self.case == "alibi":
            slopes = self.slopes
            return flex.flex_attention(q, k, v, score_mod=lambda s, b, h, qi, ki: s - slopes[h] * (qi - ki).abs())
        if self.case == "documents":
            doc = self.doc
            mask = flex.create_block_mask(lambda b, h, qi, ki: doc[qi] == doc[ki], None, None, n, n, device=q.device)
            return flex.flex_attention(q, k, v, block_mask=mask)
        if self.case == "gqa":
            mask = flex.create_block_mask(_causal, None, None, n, n, device=q.device)
            return flex.flex_attention(q, k[:, :2], v[:, :2], block_mask=mask, enable_gqa=True)
        if self.case == "lse":
            out, lse = flex.flex_attention(q, k, v, score_mod=_scaled, return_lse=True)
            return out, lse
        raise ValueError(self.case)


@pytest.mark.parametrize("case", ["causal", "window_score", "alibi", "documents", "gqa", "lse"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@torch.no_grad()
def test_flex_attention_compiles_and_matches_eager(case, dtype):
    if dtype == torch.bfloat16 and case not in ("causal", "alibi"):
        pytest.skip("bf16: two cases suffice")
    model = _Flex(case)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, generator=g).to(dtype) for _ in range(3))
    cm = uniorch.compile(model, target="interpret")
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(cm(q, k, v), model(q, k, v), **tol)
    rep = cm.explain(q, k, v)
    assert not rep.fallbacks, str(rep)
    if case in ("causal", "alibi", "gqa"):  # elementwise in the indices: one flash kernel
        assert [k.kind for k in rep.kernels].count("attention") == 1, str(rep)


def test_llama_with_flex_attention_matches_eager():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   attn_implementation="flex_attention")
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 96, (2, 8))
    cm = uniorch.compile(model, target="interpret")
    # the reference is the same weights through transformers' eager attention: eager
    # flex_attention itself returned NaN at random on an AVX2-only machine (torch 2.13, CPU)
    ref_cfg = copy.deepcopy(cfg)  # a model keeps the config it was given, not a copy
    ref_cfg._attn_implementation = "eager"
    ref = transformers.LlamaForCausalLM(ref_cfg)
    ref.load_state_dict(model.state_dict())
    assert model.config._attn_implementation == "flex_attention"
    with torch.no_grad():
        got, want = cm(ids, use_cache=False).logits, ref.eval()(ids, use_cache=False).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    rep = cm.explain(ids, use_cache=False)
    assert not rep.fallbacks, str(rep)
