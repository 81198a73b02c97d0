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


def _input_module(name: str):
    """A model file of tests/filecheck/Inputs, as a module."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "filecheck", "Inputs", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _matches_eager(model, fresh, tol):
    """Compiled against eager on two fresh inputs (`fresh()` -> (args, kwargs)), every returned
    tensor (logits and each cached key and value); the last inputs."""
    cm = uniorch.compile(model, target="interpret")
    for _ in range(2):
        args, kwargs = fresh()
        with torch.no_grad():
            got, want = cm(*args, **kwargs), model(*args, **kwargs)
        for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want)):
            torch.testing.assert_close(g, w, **tol)
    return args, kwargs


def _split_beats_whole(monkeypatch, model, args, kwargs):
    """The copies of the parts gone, fewer kernels and bytes than with the pass switched off."""
    split = explain_static(model, args, kwargs, target="interpret")
    _unsplit(monkeypatch)
    whole = explain_static(model, args, kwargs, target="interpret")
    assert _copies(whole) and not _copies(split), str(split)
    assert not split.fallbacks and len(split.kernels) < len(whole.kernels)
    assert _bytes(split) < _bytes(whole)
    return split


_FP32 = dict(rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_interleaved_qkv_parts_are_products_of_their_own(monkeypatch, dtype):
    torch.manual_seed(0)
    model = _input_module("interleaved_qkv").InterleavedQKV().eval().to(dtype)
    tol = _FP32 if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    args, kwargs = _matches_eager(model, lambda: ((torch.randn(2, 9, 32, dtype=dtype),), {}), tol)
    split = _split_beats_whole(monkeypatch, model, args, kwargs)
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
    (x,), _ = _matches_eager(model, lambda: ((torch.randn(2, 9, 32),), {}), _FP32)
    rep = explain_static(model, (x,), target="interpret")
    assert len(rep.kernels) == 1
    assert rep.kernels[0].bytes_written == 2 * 48 * 4


def test_transformers_gpt_neox_with_its_cache(monkeypatch):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPTNeoXConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, max_position_embeddings=64)
    model = transformers.GPTNeoXForCausalLM(cfg).eval()
    args, kwargs = _matches_eager(model, lambda: ((torch.randint(0, 96, (2, 8)),), {}), _FP32)
    _split_beats_whole(monkeypatch, model, args, kwargs)


def test_transformers_bloom_with_its_cache(monkeypatch):
    # Bloom views its fused q/k/v as (batch, tokens, heads, 3, dim) and selects q, k and v: the
    # view moves into the product's loops, and each part is a product of its own
    pytest.importorskip("transformers")
    model, (ids,), mask = _input_module("bloom_tiny").make()
    args, kwargs = _matches_eager(model, lambda: ((torch.randint(0, 96, ids.shape),), mask), _FP32)
    _split_beats_whole(monkeypatch, model, args, kwargs)


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
    args, kwargs = _matches_eager(model, lambda: ((torch.randn(2, 9, 32),), {}), _FP32)
    _split_beats_whole(monkeypatch, model, args, kwargs)
