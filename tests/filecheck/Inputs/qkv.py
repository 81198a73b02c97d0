"""Separate q, k and v projections (nn.Linear each) of one hidden state, split into heads: BERT's."""
import torch
from torch import nn


class QKV(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.h = heads
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, t, _ = x.shape
        return tuple(f(x).view(b, t, self.h, -1).transpose(1, 2) for f in (self.q, self.k, self.v))


def make():
    torch.manual_seed(0)
    return QKV().eval(), (torch.randn(2, 9, 32),)
