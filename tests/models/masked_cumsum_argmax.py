"""Sequence ops: cumsum over a padding mask (position ids), masked_fill, masked mean, softmax over a masked
score, argmax/argmin/max with indices, where, clamp, scatter_add of the scores into a histogram."""
import torch
from torch import nn


class SeqOps(nn.Module):
    def __init__(self, dim=8, bins=6):
        super().__init__()
        self.bins = bins
        self.score = nn.Linear(dim, 1)

    def forward(self, x, lengths):
        b, t, _ = x.shape
        mask = torch.arange(t, device=x.device)[None, :] < lengths[:, None]
        pos = torch.cumsum(mask.long(), dim=1) * mask - 1
        s = self.score(x).squeeze(-1).masked_fill(~mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        pooled = (x * p.unsqueeze(-1)).sum(1)
        mean = x.masked_fill(~mask[..., None], 0.0).sum(1) / lengths[:, None].clamp(min=1)
        best = s.argmax(-1)
        worst = torch.where(mask, s, torch.full_like(s, 1e9)).argmin(-1)
        mx, mx_idx = x.max(dim=1)
        bucket = (pos.clamp(min=0) % self.bins)
        hist = torch.zeros(b, self.bins, dtype=p.dtype, device=x.device).scatter_add(1, bucket, p)
        return pooled + mean, best, worst, mx, mx_idx, hist, torch.cumprod(p + 1, -1)


def make():
    torch.manual_seed(31)
    return SeqOps().eval(), (torch.randn(3, 6, 8), torch.randint(1, 7, (3,)))
