"""Linear → GELU on a (batch, sequence, features) input: nn.Linear views the input as 2-d."""
import torch
import torch.nn as nn


def make():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU()), (torch.randn(4, 7, 32),)
