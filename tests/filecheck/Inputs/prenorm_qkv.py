"""ViT-style pre-norm attention inputs: LayerNorm, then separate q, k and v projections."""
import torch
from torch import nn


class PreNormQKV(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x):
        h = self.norm(x)
        return self.q(h), self.k(h), self.v(h)


def make():
    torch.manual_seed(0)
    return PreNormQKV().eval(), (torch.randn(2, 9, 32),)
