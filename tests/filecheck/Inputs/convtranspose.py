"""A stride-2 transposed convolution with padding and output padding, then ReLU."""
import torch, torch.nn as nn
class M(nn.Module):
    def __init__(s):
        super().__init__(); s.t = nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)
    def forward(s, x):
        return torch.relu(s.t(x))
def make():
    torch.manual_seed(0)
    return M().eval(), (torch.randn(2, 4, 5, 5),)
