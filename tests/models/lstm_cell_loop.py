"""Two stacked nn.LSTMCell layers unrolled in Python; the initial state is an optional None argument."""
import torch
from torch import nn


class LSTMLoop(nn.Module):
    def __init__(self, inp=8, hidden=12):
        super().__init__()
        self.hidden = hidden
        self.cell1 = nn.LSTMCell(inp, hidden)
        self.cell2 = nn.LSTMCell(hidden, hidden, bias=False)

    def forward(self, x, state=None):
        b = x.shape[0]
        if state is None:
            z = x.new_zeros(b, self.hidden)
            state = ((z, z), (z, z))
        s1, s2 = state
        ys = []
        for t in range(x.shape[1]):
            s1 = self.cell1(x[:, t], s1)
            s2 = self.cell2(s1[0], s2)
            ys.append(s2[0])
        return torch.stack(ys, 1), (s1, s2)


def make():
    torch.manual_seed(21)
    return LSTMLoop().eval(), (torch.randn(2, 4, 8), None)
