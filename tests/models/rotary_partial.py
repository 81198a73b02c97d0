"""GPT-NeoX/GPT-J rotary variants: partial rotary (only the first rotary_dim channels), interleaved
even/odd rotation via strided slicing and stack/flatten, position ids as an int64 tensor input
(cos/sin gathered with index_select), RMSNorm via torch.nn.RMSNorm."""
import torch
from torch import nn


class PartialRotary(nn.Module):
    def __init__(self, dim=32, heads=2, rotary_dim=8, max_pos=32):
        super().__init__()
        self.h, self.d, self.rd = heads, dim // heads, rotary_dim
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.proj = nn.Linear(dim, dim)
        inv = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2).float() / rotary_dim))
        ang = torch.arange(max_pos).float()[:, None] * inv[None, :]
        self.register_buffer("cos", ang.cos())
        self.register_buffer("sin", ang.sin())

    def forward(self, x, position_ids):
        b, t, c = x.shape
        q = self.proj(self.norm(x)).view(b, t, self.h, self.d)
        cos = self.cos.index_select(0, position_ids.flatten()).view(b, t, 1, -1)
        sin = self.sin.index_select(0, position_ids.flatten()).view(b, t, 1, -1)
        rot, rest = q[..., : self.rd], q[..., self.rd :]
        even, odd = rot[..., 0::2], rot[..., 1::2]
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
        return torch.cat((rotated, rest), dim=-1).view(b, t, c)


def make():
    torch.manual_seed(14)
    return PartialRotary().eval(), (torch.randn(2, 6, 32), torch.randint(0, 32, (2, 6)))
