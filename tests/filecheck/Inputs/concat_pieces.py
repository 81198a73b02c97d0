"""Concatenations of two products' results: one returned whole (its pieces read by nothing else),
one whose second piece is returned as well."""
import torch


def _pieces(x, w1, w2, w3, w4):
    whole = torch.cat([x @ w1, torch.relu(x.t() @ w2)], 1)
    p = x @ w4
    shared = torch.cat([torch.tanh(x @ w3), p], 1)
    return whole, shared, p


def make():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 8, generator=g)
    return _pieces, (x, *(torch.randn(8, 16, generator=g) for _ in range(4)))
