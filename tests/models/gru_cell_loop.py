"""nn.GRUCell unrolled over time in a Python loop (hidden state carried, outputs stacked)."""
import torch
from torch import nn


class GRULoop(nn.Module):
    def __init__(self, inp=8, hidden=16):
        super().__init__()
        self.cell = nn.GRUCell(inp, hidden)
        self.out = nn.Linear(hidden, 4)

    def forward(self, x, h):
        outs = []
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
            outs.append(h)
        return self.out(torch.stack(outs, dim=1)), h


def make():
    torch.manual_seed(20)
    return GRULoop().eval(), (torch.randn(3, 5, 8), torch.randn(3, 16))
