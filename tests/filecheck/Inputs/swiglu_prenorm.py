"""Llama's MLP behind its RMSNorm, with the residual: x + down(silu(gate(n)) * up(n))."""
import torch
import torch.nn.functional as F
from torch import nn


class GatedMLP(nn.Module):
    def __init__(self, dim=32, hidden=88):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=1e-6)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        n = self.norm(x)
        return x + self.down(F.silu(self.gate(n)) * self.up(n))


def make():
    torch.manual_seed(0)
    return GatedMLP().eval(), (torch.randn(2, 7, 32),)
