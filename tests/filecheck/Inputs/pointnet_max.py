"""PointNet's shared MLP and its max over the points; a global max pool of a conv's output."""
import torch
import torch.nn.functional as F
from torch import nn


class PointNetMax(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(3, 16, 1)
        self.c2 = nn.Conv1d(16, 32, 1)
        self.conv = nn.Conv2d(4, 8, 3, padding=1)

    def forward(self, pts, img):
        h = F.relu(self.c2(F.relu(self.c1(pts))))
        return torch.max(h, 2)[0], F.adaptive_max_pool2d(self.conv(img), 1).flatten(1)


def make():
    torch.manual_seed(0)
    return PointNetMax().eval(), (torch.randn(2, 3, 128), torch.randn(2, 4, 16, 16))
