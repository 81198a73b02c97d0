"""LayerNorm before nn.MultiheadAttention(batch_first=True), which unsqueezes and permutes the
normalised input to (T, B, E) before its in-projection."""
import torch
from torch import nn


class PreNormMHA(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x):
        h = self.ln(x)
        return self.attn(h, h, h, need_weights=False)[0]


def make():
    torch.manual_seed(0)
    return PreNormMHA().eval(), (torch.randn(2, 10, 32),)
