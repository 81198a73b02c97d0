"""Conv → BatchNorm(eval) → ReLU → 2x2 max pool, then conv → 2x2 average pool: each pooling
rides on its convolution's kernel (passes/fuse.py try_join_window)."""
import torch
from torch import nn


def make():
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(8)
    bn.running_mean.uniform_(-0.5, 0.5)
    bn.running_var.uniform_(0.5, 2.0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), bn, nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 4, 3, padding=1), nn.AvgPool2d(2))
    return model.eval(), (torch.randn(2, 3, 16, 16),)
