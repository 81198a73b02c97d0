"""GPT-NeoX's attention written out: one linear layer for q, k and v, viewed as (heads, 3 x dim) and
chunked (so the three interleave per head), a rotary embedding on the first quarter of each head
of q and k, causal SDPA; k and v returned as a cache returns them, (batch, heads, tokens, dim)."""
import torch
from torch import nn


class InterleavedQKV(nn.Module):
    def __init__(self, dim=32, heads=4, rotary=2):
        super().__init__()
        self.h, self.r = heads, rotary
        self.qkv = nn.Linear(dim, 3 * dim)
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, rotary, 2).float() / rotary))

    def _rotary(self, x, cos, sin):
        rot, rest = x[..., : self.r], x[..., self.r:]
        half = rot.shape[-1] // 2
        turned = torch.cat((-rot[..., half:], rot[..., :half]), dim=-1)
        return torch.cat((rot * cos + turned * sin, rest), dim=-1)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, self.h, -1).transpose(1, 2).chunk(3, dim=-1)
        freqs = torch.arange(t, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        q, k = self._rotary(q, cos, sin), self._rotary(k, cos, sin)
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.transpose(1, 2).reshape(b, t, -1), k.contiguous(), v.contiguous()  # a cache's own copies


def make():
    torch.manual_seed(0)
    return InterleavedQKV().eval(), (torch.randn(2, 9, 32),)
