"""Llama-style decoder layer written by hand: RMSNorm, rotary embeddings (cos/sin tables, rotate_half by
slicing and concat), SDPA causal attention, SwiGLU MLP (SiLU). `start_pos` is an int argument."""
import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class LlamaLayer(nn.Module):
    def __init__(self, dim=32, heads=4, hidden=64, base=10000.0):
        super().__init__()
        self.h, self.d = heads, dim // heads
        self.attn_norm = RMSNorm(dim)
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = RMSNorm(dim)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        inv_freq = 1.0 / (base ** (torch.arange(0, self.d, 2).float() / self.d))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def rope(self, t, start_pos, like):
        pos = torch.arange(start_pos, start_pos + t, dtype=torch.float32, device=like.device)
        freqs = torch.outer(pos, self.inv_freq.float())
        emb = torch.cat((freqs, freqs), dim=-1)
        # in the activations' dtype, as transformers' Llama does (bf16 q and k stay bf16)
        return emb.cos()[None, None].to(like.dtype), emb.sin()[None, None].to(like.dtype)

    def forward(self, x, start_pos: int):
        b, t, c = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, self.h, self.d).transpose(1, 2)
        k = self.wk(h).view(b, t, self.h, self.d).transpose(1, 2)
        v = self.wv(h).view(b, t, self.h, self.d).transpose(1, 2)
        cos, sin = self.rope(t, start_pos, x)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, c))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def make():
    torch.manual_seed(13)
    return LlamaLayer().eval(), (torch.randn(2, 8, 32), 3)
