"""A ConvNeXt block at 96 channels (ConvNeXt-T's first stage): 7x7 depthwise convolution, channels-last
LayerNorm, a 4x MLP with GELU, layer scale and the residual."""
import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, c=96):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c, eps=1e-6)
        self.pw1 = nn.Linear(c, 4 * c)
        self.pw2 = nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        h = self.norm(self.dw(x).permute(0, 2, 3, 1))
        h = self.gamma * self.pw2(F.gelu(self.pw1(h)))
        return x + h.permute(0, 3, 1, 2)


def make():
    torch.manual_seed(0)
    return Block().eval(), (torch.randn(2, 96, 6, 6),)


class ReflectBlock(Block):
    """The same block padded by F.pad(mode="reflect") (a gather of index tables) before an unpadded
    depthwise convolution, at 8 channels."""

    def __init__(self):
        super().__init__(8)
        self.dw = nn.Conv2d(8, 8, 7, groups=8)

    def forward(self, x):
        h = self.norm(self.dw(F.pad(x, (3, 3, 3, 3), mode="reflect")).permute(0, 2, 3, 1))
        h = self.gamma * self.pw2(F.gelu(self.pw1(h)))
        return x + h.permute(0, 3, 1, 2)


def make_reflect():
    torch.manual_seed(0)
    return ReflectBlock().eval(), (torch.randn(2, 8, 9, 9),)
