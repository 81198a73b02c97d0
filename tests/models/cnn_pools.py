"""Pooling variety: max (with indices / ceil_mode), avg (count_include_pad off), adaptive max and avg, 1-D conv/pool."""
import torch
import torch.nn.functional as F
from torch import nn


class Pools(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 3, padding=1)
        self.conv1d = nn.Conv1d(6, 6, 3, padding=2, dilation=2)

    def forward(self, x):
        x = self.conv(x)
        a = F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)
        b = F.avg_pool2d(x, 2, stride=2, padding=1, count_include_pad=False)
        c = F.adaptive_max_pool2d(x, (3, 3))
        d = F.adaptive_avg_pool2d(x, (5, 3))
        seq = self.conv1d(x.flatten(2))
        e = F.max_pool1d(seq, 2) + F.avg_pool1d(seq, 2)
        return a.sum((2, 3)) + b.mean((2, 3)) + c.amax((2, 3)) + d.mean((2, 3)) + e.mean(2)


def make():
    torch.manual_seed(4)
    return Pools().eval(), (torch.randn(2, 4, 10, 10),)
