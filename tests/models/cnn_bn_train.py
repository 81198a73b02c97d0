"""CNN with BatchNorm in train mode: batch statistics and running-stat buffer updates (mutations)."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8, momentum=0.3, affine=False)
        self.bn3 = nn.BatchNorm1d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        x = nn.functional.avg_pool2d(x, 2)
        x = x.mean(dim=(2, 3))
        return self.fc(self.bn3(x))


def make():
    torch.manual_seed(3)
    return Net().train(), (torch.randn(4, 3, 8, 8),)
