"""A pre-norm MLP half-block, x + proj(gelu(fc(layer_norm(x)))), with 24-wide rows (not a power of
two) and a 40-wide hidden layer: one chain kernel with the LayerNorm as its prologue."""
import torch
from torch import nn


class PreNormMLP(nn.Module):
    def __init__(self, dim=24, hidden=40):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, hidden)
        self.proj = nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.proj(torch.nn.functional.gelu(self.fc(self.norm(x))))


def make():
    torch.manual_seed(0)
    return PreNormMLP().eval(), (torch.randn(2, 5, 24),)
