"""A float32 causal self-attention: one fused q/k/v projection (nn.Linear) split into heads, then
SDPA; `make_manual` writes the attention out as softmax(q kᵀ · scale) v."""
import torch
import torch.nn.functional as F
from torch import nn


class Attn(nn.Module):
    def __init__(self, dim=64, heads=2, manual=False):
        super().__init__()
        self.heads, self.manual = heads, manual
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.manual:
            return torch.softmax(q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5, -1) @ v
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def make():
    torch.manual_seed(0)
    return Attn().eval(), (torch.randn(2, 40, 64),)


def make_manual():
    torch.manual_seed(0)
    return Attn(manual=True).eval(), (torch.randn(2, 40, 64),)
