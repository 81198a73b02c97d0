"""BERT's half-layer after attention, width 48 (not a power of two): the out-projection of the
heads (2 x 9 tokens, 3 heads of 16) with its bias, residual and LayerNorm, then the MLP with its
residual and LayerNorm."""
import torch
import torch.nn.functional as F
from torch import nn


class PostNorm(nn.Module):
    def __init__(self, dim=48, hidden=100):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.ln2 = nn.LayerNorm(dim)

    def forward(self, a, x):
        h = self.ln1(x + self.proj(a.flatten(-2)))
        return self.ln2(h + self.fc2(F.gelu(self.fc1(h))))


def make():
    torch.manual_seed(0)
    return PostNorm().eval(), (torch.randn(2, 9, 3, 16), torch.randn(2, 9, 48))
