"""MobileNetV3-style inverted residual: depthwise conv, hardswish, hardsigmoid squeeze-excite, eval BN, ConvTranspose2d."""
import torch
import torch.nn.functional as F
from torch import nn


class InvertedResidual(nn.Module):
    def __init__(self, c=8, expand=4):
        super().__init__()
        h = c * expand
        self.expand = nn.Conv2d(c, h, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(h)
        self.dw = nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False)
        self.bn2 = nn.BatchNorm2d(h)
        self.se_reduce = nn.Conv2d(h, h // 4, 1)
        self.se_expand = nn.Conv2d(h // 4, h, 1)
        self.project = nn.Conv2d(h, c, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c)
        self.up = nn.ConvTranspose2d(c, 4, 2, stride=2)

    def forward(self, x):
        h = F.hardswish(self.bn1(self.expand(x)))
        h = F.hardswish(self.bn2(self.dw(h)))
        s = F.adaptive_avg_pool2d(h, 1)
        s = F.hardsigmoid(self.se_expand(F.relu(self.se_reduce(s))))
        h = self.bn3(self.project(h * s))
        return self.up(x + h)


def make():
    torch.manual_seed(7)
    return InvertedResidual().eval(), (torch.randn(2, 8, 6, 6),)
