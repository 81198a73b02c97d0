"""A product read only in slices is a product per slice (passes/split_products.py).

GPT-NeoX's fused q/k/v projection is viewed as heads and chunked: each part is a strided slice of
one product's output, and its readers (the rotary embedding, the cache's transposed keys and
values) took it through copy kernels. Split, each part is its own product whose epilogue writes
it where its readers want it. Checked against eager on fresh inputs, with the split switched off
for the kernel and byte comparison.
"""
import importlib.util
import os

import pytest
import torch
import torch.utils._pytree as pytree
from torch import nn

import uniorch
from uniorch.api import explain_static
from uniorch.passes import preprocess

_MOVES = {"aten.permute.default", "aten.transpose.int", "<built-in function getitem>", "aten.cat.default",
          "aten.view.default", "aten.split.Tensor", "aten.chunk.default", "aten.slice.Tensor", "aten.select.int",
          "aten.unbind.int"}


def _unsplit(monkeypatch):
    monkeypatch.setattr(preprocess, "split_sliced_products", lambda func_op: 0)


def _copies(rep):
    """Kernels that only move the fused output's parts (permutes of its slices)."""
    ops = [{op for op, _ in k.ops} for k in rep.kernels]
    return [k for k, o in zip(rep.kernels, ops) if o <= _MOVES and "aten.permute.default" in o]


def _bytes(rep):
    return sum(k.bytes_read + k.bytes_written for k in rep.kernels)


def _interleaved_qkv():
    """tests/filecheck/Inputs/interleaved_qkv.py's module: GPT-NeoX's attention written out."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "filecheck", "Inputs", "interleaved_qkv.py")
    spec = importlib.util.spec_from_file_location("interleaved_qkv", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.InterleavedQKV


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_interleaved_qkv_parts_are_products_of_their_own(monkeypatch, dtype):
    torch.manual_seed(0)
    model = _interleaved_qkv()().eval().to(dtype)
    cm = uniorch.compile(model, target="interpret")
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for _ in range(2):
        x = torch.randn(2, 9, 32, dtype=dtype)
        with torch.no_grad():
            for g, w in zip(cm(x), model(x)):
                torch.testing.assert_close(g, w, **tol)
    split = explain_static(model, (x,), target="interpret")
    _unsplit(monkeypatch)
    whole = explain_static(model, (x,), target="interpret")
    assert _copies(whole) and not _copies(split), str(split)
    assert not split.fallbacks and len(split.kernels) < len(whole.kernels)
    assert _bytes(split) < _bytes(whole)
    assert [k.kind for k in split.kernels].count("contraction") == 1  # the three parts: siblings


def test_a_single_slice_computes_only_its_columns():
    # the last token's logits of a product over every token: only that row is computed
    class LastRow(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(32, 48)

        def forward(self, x):
            return self.head(x)[:, -1:, :] * 2.0

    torch.manual_seed(0)
    model = LastRow().eval()
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        torch.testing.assert_close(uniorch.compile(model, target="interpret")(x), model(x), rtol=1e-5, atol=1e-5)
    rep = explain_static(model, (x,), target="interpret")
    assert len(rep.kernels) == 1
    assert rep.kernels[0].bytes_written == 2 * 48 * 4


def test_transformers_gpt_neox_with_its_cache(monkeypatch):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPTNeoXConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, max_position_embeddings=64)
    model = transformers.GPTNeoXForCausalLM(cfg).eval()
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
    whole = explain_static(model, (ids,), target="interpret")
    assert _copies(whole) and not _copies(split), str(split)
    assert not split.fallbacks and len(split.kernels) < len(whole.kernels)
    assert _bytes(split) < _bytes(whole)


def test_transformers_bloom_with_its_cache(monkeypatch):
    # Bloom views its fused q/k/v as (batch, tokens, heads, 3, dim) and selects q, k and v: the
    # view moves into the product's loops, and each part is a product of its own
    pytest.importorskip("transformers")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "filecheck", "Inputs", "bloom_tiny.py")
    spec = importlib.util.spec_from_file_location("bloom_tiny", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model, (ids,), kwargs = module.make()
    cm = uniorch.compile(model, target="interpret")
    for _ in range(2):
        ids = torch.randint(0, 96, ids.shape)
        with torch.no_grad():
            got, want = cm(ids, **kwargs), model(ids, **kwargs)
        torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-5)
        for g, w in zip(pytree.tree_leaves(got.past_key_values), pytree.tree_leaves(want.past_key_values)):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    split = explain_static(model, (ids,), kwargs, target="interpret")
    _unsplit(monkeypatch)
    whole = explain_static(model, (ids,), kwargs, target="interpret")
    assert _copies(whole) and not _copies(split), str(split)
    assert not split.fallbacks and len(split.kernels) < len(whole.kernels)
    assert _bytes(split) < _bytes(whole)


class UnbindQKV(nn.Module):
    """ModernBERT's attention projection: one linear layer viewed as (3, heads, dim), the heads
    moved before the tokens, then unbound into q, k and v; k and v returned as a cache's copies."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.h = heads
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.wqkv(x).view(b, t, 3, self.h, -1).transpose(3, 1).unbind(dim=2)
        o = nn.functional.scaled_dot_product_attention(q, k, v)
        return self.out(o.transpose(1, 2).reshape(b, t, -1)), k.contiguous(), v.contiguous()


def test_unbind_of_a_transposed_head_view_is_products_of_their_own(monkeypatch):
    torch.manual_seed(0)
    model = UnbindQKV().eval()
    cm = uniorch.compile(model, target="interpret")
    for _ in range(2):
        x = torch.randn(2, 9, 32)
        with torch.no_grad():
            for g, w in zip(cm(x), model(x)):
                torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    split = explain_static(model, (x,), target="interpret")
    _unsplit(monkeypatch)
    whole = explain_static(model, (x,), target="interpret")
    assert _copies(whole) and not _copies(split), str(split)
    assert not split.fallbacks and len(split.kernels) < len(whole.kernels)
    assert _bytes(split) < _bytes(whole)
