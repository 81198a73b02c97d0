"""nn.LSTM (2 layers, batch_first, with projection) returning output and the (h, c) state tuple."""
import torch
from torch import nn


def make():
    torch.manual_seed(23)
    model = nn.LSTM(6, 12, num_layers=2, batch_first=True, proj_size=4).eval()
    return model, (torch.randn(2, 5, 6),)
