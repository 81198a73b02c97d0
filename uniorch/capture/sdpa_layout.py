"""SDPA's output laid out as eager's: like the query (strides in the query's order).

Why: eager's CPU kernel (flash attention for CPU, chosen whenever dropout is 0) allocates its
output in the query's memory order, so nanoGPT's `y.transpose(1, 2).reshape(B, T, C)` after
heads made by `view(B, T, H, D).transpose(1, 2)` is a view, and a later `.view(-1, C)` is valid.
The decomposition capture applies (the math form) gives a contiguous output instead; re-traced
through it, the reshape became a strided view and the `.view` failed: the whole model ran eagerly.
The permute / contiguous / permute added here is a transposed store of the attention kernel.
"""
from __future__ import annotations

import torch


def like_eager(decomp):
    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        out = decomp(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        if query.dim() != 4 or dropout_p != 0.0 or out.dim() != 4:
            return out  # eager's math path: contiguous
        strides = query.stride()
        order = sorted(range(4), key=lambda d: -strides[d])  # stable: ties keep the dims' order
        if order == list(range(4)):
            return out
        inverse = [order.index(d) for d in range(4)]
        return out.permute(order).contiguous().permute(inverse)

    return sdpa
