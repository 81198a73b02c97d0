"""A two-layer MLP for the FileCheck suite (python-model.test checks the lines of forward)."""
import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))  # line 13
        return self.fc2(h)  # line 14


def make():
    torch.manual_seed(0)
    return MLP().eval(), (torch.randn(2, 8),)
