"""A model whose example input does not fit its layer (python-errors.test checks these line numbers)."""
import torch
from torch import nn


class Proj(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 4)

    def forward(self, x):
        y = x * 2
        return self.proj(y)  # line 13: x has 5 features, the layer wants 8


def make():
    return Proj(), (torch.randn(3, 5),)
