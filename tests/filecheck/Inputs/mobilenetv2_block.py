"""MobileNetV2's inverted residual at 16 channels: 1x1 expansion to 96 (BatchNorm, ReLU6), 3x3
depthwise (BatchNorm, ReLU6), 1x1 projection back to 16 (BatchNorm) and the residual."""
import torch
from torch import nn


def _cba(cin, cout, k, groups=1, act=True):
    layers = [nn.Conv2d(cin, cout, k, 1, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU6()) if act else nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, c=16, t=6):
        super().__init__()
        self.conv = nn.Sequential(_cba(c, c * t, 1), _cba(c * t, c * t, 3, groups=c * t), _cba(c * t, c, 1, act=False))

    def forward(self, x):
        return x + self.conv(x)


def make():
    torch.manual_seed(0)
    return InvertedResidual().eval(), (torch.randn(2, 16, 10, 10),)
