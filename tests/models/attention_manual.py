"""Hand-written multi-head causal self-attention: q/k/v projections, transpose/reshape, matmul, masked_fill
with a triu causal mask, softmax, and an extra padding mask passed as a boolean tensor."""
import math

import torch
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x, keep):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(c // self.heads)
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=1)
        scores = scores.masked_fill(causal, float("-inf"))
        scores = scores.masked_fill(~keep[:, None, None, :], -1e9)
        attn = torch.softmax(scores, dim=-1)
        y = (attn @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


def make():
    torch.manual_seed(10)
    keep = torch.ones(2, 8, dtype=torch.bool)
    keep[1, 6:] = False
    return CausalSelfAttention().eval(), (torch.randn(2, 8, 32), keep)
