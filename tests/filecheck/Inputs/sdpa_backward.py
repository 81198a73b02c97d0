"""SDPA's CPU backward op as a training backward records it (causal, 64 queries and keys, head
dim 16): the gradients of q, k and v from the output, its gradient and the log-sum-exp."""
import torch
from torch import nn


class SdpaBackward(nn.Module):
    def forward(self, grad_out, q, k, v, out, lse):
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, q, k, v, out, lse, 0.0, True)


def make():
    q, k, v, out, grad_out = (torch.randn(1, 2, 64, 16) for _ in range(5))
    return SdpaBackward(), (grad_out, q, k, v, out, torch.randn(1, 2, 64))
