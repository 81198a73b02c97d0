"""SDPA's CPU kernel as a training forward records it: the output and the log-sum-exp of the scores
(the backward's input), here with grouped-query heads and a causal mask."""
import torch
from torch import nn


class ForwardWithLse(nn.Module):
    def forward(self, q, k, v):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)
        return out, lse


def make():
    return ForwardWithLse(), (torch.randn(1, 4, 40, 16), torch.randn(1, 2, 40, 16), torch.randn(1, 2, 40, 16))
