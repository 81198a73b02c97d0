"""Plain MLP: Linear + ReLU + GELU + Dropout (eval), bias and no-bias layers."""
import torch
from torch import nn


def make():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(16, 32),
        nn.ReLU(),
        nn.Linear(32, 32, bias=False),
        nn.GELU(),
        nn.Dropout(0.1),
        nn.Linear(32, 8),
    ).eval()
    return model, (torch.randn(4, 16),)
