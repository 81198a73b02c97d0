"""A linear layer's parameter gradients as its backward computes them: dW = dYᵀ X over batch x
tokens rows and db = sum(dY, rows); the transposed product Xᵀ dE with dE's column sum (the B
factor's); and two sums that are no sum over a product's rows as it reads them: dY along its
features, and dY over batch and tokens as separate dims (the product reads them merged)."""
import torch


def grads(dy, x, de):
    dy2, x2, de2 = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1]), de.reshape(-1, de.shape[-1])
    return dy2.t() @ x2, dy2.sum(0), x2.t() @ de2, de2.sum(0, keepdim=True), dy.sum(2), dy.sum((0, 1))


def make():
    torch.manual_seed(0)
    return grads, (torch.randn(4, 50, 48), torch.randn(4, 50, 40), torch.randn(4, 50, 24))
