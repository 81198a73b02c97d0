"""SDPA with a padding mask built as transformers builds it (masking_utils: index functions of
batch, query and key positions vmapped over aranges): `padding_mask[b, kv] & (q >= 0)` gathered
from the (batch, key) mask, then 0 / -inf."""
import torch
import torch.nn.functional as F


def padded_attention(q, k, v, attention_mask):
    b, t = attention_mask.shape
    pad = attention_mask.bool()
    bi = torch.arange(b).view(b, 1, 1, 1)
    qi = torch.arange(t).view(1, 1, t, 1)
    ki = torch.arange(t).view(1, 1, 1, t)
    allowed = pad[bi, ki] & (qi >= 0)
    mask = torch.where(allowed, torch.tensor(0.0), torch.tensor(float("-inf")))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def make():
    torch.manual_seed(0)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    return padded_attention, (torch.randn(2, 4, 9, 8), torch.randn(2, 4, 9, 8), torch.randn(2, 4, 9, 8), mask)
