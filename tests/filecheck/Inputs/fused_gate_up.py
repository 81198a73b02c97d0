"""Phi-3's MLP, too wide for one chain kernel: one gate_up projection, chunked in two, then
down(up * silu(gate)); hidden 384."""
import torch
import torch.nn.functional as F
from torch import nn


class FusedGateUp(nn.Module):
    def __init__(self, dim=320, hidden=384, bias=False):
        super().__init__()
        self.gate_up = nn.Linear(dim, 2 * hidden, bias=bias)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(up * F.silu(gate))


def make():
    torch.manual_seed(0)
    return FusedGateUp().eval(), (torch.randn(2, 9, 320),)


def make_bias():
    torch.manual_seed(0)
    return FusedGateUp(bias=True).eval(), (torch.randn(2, 9, 320),)
