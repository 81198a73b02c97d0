"""Llama-style RoPE (rotate_half by slicing and concatenation) on q and k, then SDPA with fewer
key-value heads than query heads (enable_gqa): q is viewed as (batch, kv group, repeat) heads."""
import torch
import torch.nn.functional as F


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rope_attention(q, k, v, cos, sin):
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def make():
    torch.manual_seed(0)
    return rope_attention, (torch.randn(2, 4, 19, 16), torch.randn(2, 2, 19, 16), torch.randn(2, 2, 19, 16),
                            torch.randn(19, 16), torch.randn(19, 16))
