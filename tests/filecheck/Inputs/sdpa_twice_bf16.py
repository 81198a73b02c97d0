"""bf16 q read by two SDPA calls over grouped-query k and v: SDPA's math widens q to float32, and
the widened q reaches both through the grouped-query reshape."""
import torch
import torch.nn.functional as F
from torch import nn


class M(nn.Module):
    def __init__(s, d=32, h=4, kvh=2):
        super().__init__()
        s.h, s.kvh, s.dh = h, kvh, d // h
        s.q, s.kv = nn.Linear(d, d, bias=False), nn.Linear(d, 2 * kvh * s.dh, bias=False)

    def forward(s, x, bias):
        b, t, _ = x.shape
        q = s.q(x).view(b, t, s.h, s.dh).transpose(1, 2)
        k, v = s.kv(x).view(b, t, 2, s.kvh, s.dh).permute(2, 0, 3, 1, 4).unbind(0)
        k, v = (z.repeat_interleave(s.h // s.kvh, dim=1) for z in (k, v))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True) \
            + F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3)


def make():
    torch.manual_seed(0)
    return M().eval().to(torch.bfloat16), (torch.randn(2, 8, 32, dtype=torch.bfloat16),
                                           torch.randn(2, 1, 8, 8, dtype=torch.bfloat16))
