"""Grouped-query attention with the causal mask built from positions, as transformers' Llama does
when called with input_ids alone: a boolean (1, 1, t, t) mask from `arange` passed to SDPA as
attn_mask with an explicit scale; 4 query heads and 2 kv heads of 8 (repeat_kv) projected from a
(batch, length, 32) input, so the weights fix the head dims and batch and length may be symbolic."""
import torch
import torch.nn.functional as F
from torch import nn


def repeat_kv(x, n):
    b, g, t, d = x.shape
    return x[:, :, None].expand(b, g, n, t, d).reshape(b, g * n, t, d)


class MaskedGQA(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(32, 32, bias=False), nn.Linear(32, 16, bias=False), nn.Linear(32, 16, bias=False)
        self.scaling = 8 ** -0.5

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, 4, 8).transpose(1, 2)
        k = self.k(x).view(b, t, 2, 8).transpose(1, 2)
        v = self.v(x).view(b, t, 2, 8).transpose(1, 2)
        pos = torch.arange(t, device=x.device)
        mask = (pos[None, :] <= pos[:, None])[None, None].expand(b, 1, t, t)  # key <= query, per batch
        out = F.scaled_dot_product_attention(q, repeat_kv(k, 2), repeat_kv(v, 2), attn_mask=mask, scale=self.scaling)
        return out.transpose(1, 2).reshape(b, t, 32)


def make():
    torch.manual_seed(0)
    return MaskedGQA(), (torch.randn(2, 24, 32),)
