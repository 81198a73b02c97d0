"""Attention through F.scaled_dot_product_attention: causal (is_causal=True), with an additive float mask,
and grouped-query attention (kv heads repeated with repeat_interleave)."""
import torch
import torch.nn.functional as F
from torch import nn


class SDPA(nn.Module):
    def __init__(self, dim=32, heads=4, kv_heads=2):
        super().__init__()
        self.h, self.kvh, self.d = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, heads * self.d, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.d, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)

    def forward(self, x, bias):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.h, self.d).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, self.kvh, self.d).permute(2, 0, 3, 1, 4).unbind(0)
        k = k.repeat_interleave(self.h // self.kvh, dim=1)
        v = v.repeat_interleave(self.h // self.kvh, dim=1)
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        biased = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3)
        y = (causal + biased).transpose(1, 2).reshape(b, t, -1)
        return self.o(y)


def make():
    torch.manual_seed(11)
    return SDPA().eval(), (torch.randn(2, 8, 32), torch.randn(2, 1, 8, 8))
