"""A bf16 MLP and a bf16 causal SDPA: torch-mlir widens the 16-bit factors of each matmul to float32
in generics of their own, which must not reach tl.dot as float32 tiles."""
import torch
import torch.nn.functional as F
from torch import nn


def make():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.LayerNorm(128), nn.Linear(128, 64))
    return m.eval().to(torch.bfloat16), (torch.randn(32, 64, dtype=torch.bfloat16),)


class Sdpa(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def make_sdpa():
    qkv = [torch.randn(1, 2, 64, 32, dtype=torch.bfloat16) for _ in range(3)]
    return Sdpa(), tuple(qkv)

