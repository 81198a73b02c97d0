"""A float64 model's fused kernels compute in float64: the chain kernel (two products through an
activation) and the flash-attention kernel once rounded their hidden activation and scores to
float32, an error of 1e-7 where eager's is 1e-15."""
import pytest
import torch
import torch.nn.functional as F

import uniorch


def _inputs(seed, *shapes):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, dtype=torch.float64, generator=gen) for s in shapes]


@pytest.mark.parametrize("act", ["none", "gelu"])
def test_chained_products_keep_float64(act):
    def f(x, a, b):
        h = x @ a
        return (F.gelu(h) if act == "gelu" else h) @ b

    args = _inputs(1, (5, 16), (16, 32), (32, 4))
    cm = uniorch.compile(f, fallback="error")
    torch.testing.assert_close(cm(*args), f(*args), rtol=1e-12, atol=1e-12)
    assert [k.kind for k in cm.explain(*args).kernels] == ["chain"]


@pytest.mark.parametrize("form", ["sdpa", "written"])
def test_attention_keeps_float64(form):
    def f(q, k, v):
        if form == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.softmax(q @ k.transpose(-1, -2) / 4.0, -1) @ v

    args = _inputs(2, (1, 2, 40, 16), (1, 2, 40, 16), (1, 2, 40, 16))
    cm = uniorch.compile(f, fallback="error")
    torch.testing.assert_close(cm(*args), f(*args), rtol=1e-12, atol=1e-12)
    assert "attention" in [k.kind for k in cm.explain(*args).kernels]
