"""A Llama MLP too wide for one chain kernel: down(silu(gate(x)) * up(x)), hidden 384."""
import torch
import torch.nn.functional as F
from torch import nn


class GatedMLP(nn.Module):
    def __init__(self, dim=320, hidden=384):
        super().__init__()
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def make():
    torch.manual_seed(0)
    return GatedMLP().eval(), (torch.randn(2, 9, 320),)
