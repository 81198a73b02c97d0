"""Rotary embedding on a projection: q * cos + rotate_half(q) * sin, rotate_half = cat(-q2, q1)."""
import torch, torch.nn as nn
def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]; x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)
class M(nn.Module):
    def __init__(s):
        super().__init__(); s.q = nn.Linear(16, 16)
    def forward(s, x, cos, sin):
        q = s.q(x).view(1, 5, 2, 8).transpose(1, 2)
        return q * cos + rotate_half(q) * sin
def make():
    torch.manual_seed(0)
    return M().eval(), (torch.randn(1, 5, 16), torch.randn(1, 1, 5, 8), torch.randn(1, 1, 5, 8))
