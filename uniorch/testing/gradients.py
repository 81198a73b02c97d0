"""Gradients of a compiled model beside eager's, for tests: the same weights in two copies, the
same input, and a loss weighted by a fresh random tensor (a plain sum would give every output the
same gradient, which a LayerNorm's backward sends to zero)."""
from __future__ import annotations

from typing import Callable

import torch


def weighted_grads(make: Callable[[], torch.nn.Module], x: torch.Tensor, seed: int = 5,
                   target: str = "interpret") -> list[tuple[torch.Tensor, torch.Tensor]]:
    """[(compiled, eager)] gradients of `sum(model(x) * w)`: the input's first, then each
    parameter's, for two models `make()` builds (the second loads the first's weights)."""
    import uniorch

    model, ref = make(), make()
    ref.load_state_dict(model.state_dict())
    cm = uniorch.compile(model, target=target)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    got = cm(x1)
    w = torch.randn(got.shape, generator=torch.Generator().manual_seed(seed))
    (got * w).sum().backward()
    (ref(x2) * w).sum().backward()
    return [(x1.grad, x2.grad)] + [(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters())]


__all__ = ["weighted_grads"]
