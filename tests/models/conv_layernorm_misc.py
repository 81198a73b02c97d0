"""ConvNeXt-style block: 7x7 depthwise conv, channels-last LayerNorm via permute, pointwise Linear MLP,
GELU, layer scale, stochastic depth off in eval; padding via F.pad (reflect) and pixel_shuffle."""
import torch
import torch.nn.functional as F
from torch import nn


class ConvNeXtBlock(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.pw1 = nn.Linear(c, 4 * c)
        self.pw2 = nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 0.5))
        self.to_shuffle = nn.Conv2d(c, 4 * 2, 1)

    def forward(self, x):
        h = self.dw(F.pad(x, (3, 3, 3, 3), mode="reflect"))
        h = self.norm(h.permute(0, 2, 3, 1))
        h = self.gamma * self.pw2(F.gelu(self.pw1(h)))
        x = x + h.permute(0, 3, 1, 2)
        return F.pixel_shuffle(self.to_shuffle(x), 2)


def make():
    torch.manual_seed(33)
    return ConvNeXtBlock().eval(), (torch.randn(2, 8, 9, 9),)
