"""Fractional max pooling as gathers and a windowed max (torch-mlir has no lowering for it).

The op is deterministic given its `random_samples` input (one sample per batch, channel and
spatial dim; F.fractional_max_pool2d draws them with torch.rand, which compiles): each output
position's window start follows ATen's `generate_intervals`, computed in the input's dtype as
ATen does, and the window's max and flat index follow its CPU kernel (first max; a NaN wins, the
last NaN in the window).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _starts(sample: torch.Tensor, in_size: int, out_size: int, pool: int) -> torch.Tensor:
    """ATen's generate_intervals for one spatial dim, for every (batch, channel) sample at once:
    int((i + s) * alpha) - int(s * alpha), and the last window flush with the input's end."""
    last = torch.full((*sample.shape, 1), in_size - pool, dtype=torch.int64, device=sample.device)
    if out_size == 1:
        return last
    alpha = torch.full((), in_size - pool, dtype=sample.dtype, device=sample.device) / (out_size - 1)
    i = torch.arange(out_size - 1, device=sample.device).to(sample.dtype)
    s = sample[..., None]
    seq = ((i + s) * alpha).to(torch.int64) - (s * alpha).to(torch.int64)
    return torch.cat([seq, last], -1)


def _fractional_max_pool(x, kernel_size, output_size, random_samples):
    d = len(kernel_size)
    if x.dtype not in (torch.float32, torch.float64) or x.numel() == 0:
        return NotImplemented
    batched = x.dim() == d + 2
    if not batched:
        x, random_samples = x[None], random_samples[:1] if random_samples.dim() == 3 else random_samples[None]
    spatial = list(x.shape[-d:])
    n, c = x.shape[0], x.shape[1]
    # ATen reads sample 0 for the last (width) dim of 2-d pooling and dims in order for 3-d
    order = [1, 0] if d == 2 else [0, 1, 2]
    flat = torch.zeros((n, c) + (1,) * (2 * d), dtype=torch.int64, device=x.device)
    stride = 1
    for k in reversed(range(d)):
        starts = _starts(random_samples[..., order[k]], spatial[k], output_size[k], kernel_size[k])  # [n, c, out_k]
        offs = starts[..., :, None] + torch.arange(kernel_size[k], device=x.device)  # [n, c, out_k, pool_k]
        shape = [n, c] + [1] * (2 * d)
        shape[2 + k], shape[2 + d + k] = output_size[k], kernel_size[k]
        flat = flat + offs.reshape(shape) * stride
        stride *= spatial[k]
    window = 1
    for k in kernel_size:
        window *= k
    flat = flat.expand(n, c, *output_size, *kernel_size).reshape(n, c, -1, window)
    vals = torch.gather(x.reshape(n, c, -1), 2, flat.reshape(n, c, -1)).reshape(flat.shape)
    nan = torch.isnan(vals)
    k_iota = torch.arange(window, device=x.device)
    last_nan = torch.amax(torch.where(nan, k_iota, -1), -1, keepdim=True)
    first_max = torch.argmax(torch.where(nan, -torch.inf, vals), -1, keepdim=True)
    pick = torch.where(last_nan >= 0, last_nan, first_max)
    out = torch.gather(vals, -1, pick).reshape(n, c, *output_size)
    index = torch.gather(flat, -1, pick).reshape(n, c, *output_size)
    if not batched:
        out, index = out[0], index[0]
    return out, index


TABLE = {
    aten.fractional_max_pool2d.default: _fractional_max_pool,
    aten.fractional_max_pool3d.default: _fractional_max_pool,
}
