"""Per-row histograms: scatter_add along dim 1 with a full index tensor (no expand), weights
scaled first. torch-mlir gives the scatter a coordinate pair per element."""
import torch
from torch import nn


class Hist(nn.Module):
    def forward(self, p, bucket):
        return torch.zeros(p.shape[0], 6).scatter_add(1, bucket, p * 2)


def make():
    g = torch.Generator().manual_seed(0)
    return Hist(), (torch.rand(8, 30, generator=g), torch.randint(0, 6, (8, 30), generator=g))
