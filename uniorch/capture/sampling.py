"""`multinomial` as Gumbel-max sampling, so sampling steps (LLM decoding) compile.

Why: torch-mlir cannot lower `aten.multinomial`. Adding independent Gumbel noise to log p and
taking the argmax draws category i with probability p_i / sum(p); the top-k of one such draw is a
sample of k categories without replacement (the Gumbel-top-k trick). Zero-probability
categories get -inf and are never drawn. The numbers come from uniorch's seeded generator, so
the stream differs from eager's, as every random op's does. Inputs eager rejects (negative,
infinite or NaN probabilities, an all-zero row) fail a run-time check and run eagerly, which
raises eager's error.
"""
from __future__ import annotations

import torch

from .checks import require

aten = torch.ops.aten


def _gumbel(shape, dtype, device) -> torch.Tensor:
    u = torch.rand(shape, dtype=dtype, device=device)
    tiny = torch.finfo(dtype).tiny
    return -torch.log(-torch.log(u.clamp(min=tiny)))  # u = 0 would give -inf - never the max


def _multinomial(probs, num_samples, replacement=False, *, generator=None):
    if generator is not None or not probs.dtype.is_floating_point or probs.numel() == 0:
        return NotImplemented
    n = probs.shape[-1]
    if not replacement and num_samples > n:
        return NotImplemented  # eager raises
    p = probs.float() if probs.dtype in (torch.float16, torch.bfloat16) else probs
    ok = (p >= 0).all(-1) & torch.isfinite(p).all(-1) & (p.sum(-1) > 0)
    require(ok, "multinomial: probabilities non-negative, finite, not all zero")
    logp = torch.log(p)
    if replacement:
        noise = _gumbel((*p.shape[:-1], num_samples, n), p.dtype, p.device)
        return torch.argmax(logp.unsqueeze(-2) + noise, -1)
    noise = _gumbel(p.shape, p.dtype, p.device)
    keys = torch.where(p > 0, logp + noise, -torch.inf)
    # rows with fewer non-zero categories than num_samples: eager raises
    require((p > 0).sum(-1) >= num_samples, "multinomial: enough categories with non-zero probability")
    return torch.topk(keys, num_samples, -1).indices


TABLE = {aten.multinomial.default: _multinomial}
