"""RoPE with its table computed in the model (Llama's `outer(positions, inv_freq)`, concatenated with
itself, then cos and sin) before causal SDPA."""
import torch
import torch.nn.functional as F


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rope_attention(q, k, v, inv_freq):
    pos = torch.arange(q.shape[2], dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def make():
    torch.manual_seed(0)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 16, 2).float() / 16))
    return rope_attention, (torch.randn(2, 4, 19, 16), torch.randn(2, 4, 19, 16), torch.randn(2, 4, 19, 16), inv_freq)
