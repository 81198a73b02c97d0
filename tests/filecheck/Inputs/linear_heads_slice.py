"""An RMSNorm, then a linear layer whose output is split into heads and sliced (GPT-NeoX's partial
rotary takes the first channels of each head): upstream's reshape propagation moves the head view
above the bias add, but not into the matmul."""
import torch
from torch import nn


class LinearHeadsSlice(nn.Module):
    def __init__(self, dim=32, heads=2, part=8):
        super().__init__()
        self.h, self.part = heads, part
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.proj(self.norm(x)).view(b, t, self.h, -1)
        return q[..., : self.part] * 2.0


def make():
    torch.manual_seed(0)
    return LinearHeadsSlice().eval(), (torch.randn(2, 6, 32),)
