"""A norm's weight gradient in training, sum over the rows of dy * (x - mean) * rstd (LayerNorm) or
dy * x * rstd (RMSNorm), comes from per-chunk partials that the matmul computing dy writes in
its epilogue (passes/tile_stats.py `_match_split`), as the bias's gradient (the plain sum of dy)
already did: no kernel reads dy and x again to sum them, and dy is not written when nothing else
reads it. Gradients against eager on fresh inputs, fp32 and under bf16 autocast; `explain`'s
bytes of the backward."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import uniorch


class RMSNorm(nn.Module):
    """Llama's, written out."""

    def __init__(self, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


class PreNorm(nn.Module):
    """GPT-2's and Llama's residual branch (norm, MLP), then the final norm and the head."""

    def __init__(self, norm: str, d: int = 48):
        super().__init__()
        make = (lambda: nn.LayerNorm(d)) if norm == "layernorm" else (lambda: RMSNorm(d))
        self.n1, self.n2 = make(), make()
        self.fc1, self.fc2, self.head = nn.Linear(d, 2 * d), nn.Linear(2 * d, d), nn.Linear(d, 24)
        with torch.no_grad():  # norm weights away from 1, so a wrong gradient shows
            for n in (self.n1, self.n2):
                n.weight.uniform_(0.5, 1.5)

    def forward(self, x):
        h = x + self.fc2(torch.nn.functional.gelu(self.fc1(self.n1(x))))
        return self.head(self.n2(h))


def _grads(model, x, autocast: bool):
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = model(x)
    (out.float() * torch.linspace(-1, 1, out.shape[-1])).square().mean().backward()
    return {n.removeprefix("_orig_mod."): p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_norm_weight_gradients_come_from_the_matmuls_partials(norm):
    torch.manual_seed(0)
    model = PreNorm(norm).train()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    for seed in (1, 2):
        x = torch.randn(2, 32, 48, generator=torch.Generator().manual_seed(seed), requires_grad=True)
        got, want = _grads(cm, x, False), _grads(ref, x.detach().requires_grad_(), False)
        for n in want:
            torch.testing.assert_close(got[n], want[n], rtol=1e-4, atol=1e-6, msg=n)

    rep = cm.explain(x).backward
    assert rep is not None and not rep.fallbacks, str(rep)
    act = 2 * 32 * 48 * 4
    # the norm weights' sums ride on the matmuls producing dy: no kernel reads two activations
    # to write a vector (the separate column sum of dy * x-hat it was)
    sums = [k for k in rep.kernels if k.bytes_read >= 2 * act and k.bytes_written < act // 4 and k.kind == "reduction"]
    assert not sums, str(rep)
    stats = [k for k in rep.kernels if k.kind == "contraction" and "tile statistics" in k.source]
    assert len(stats) >= 2, str(rep)


def test_norm_weight_gradients_under_bf16_autocast():
    """The norm runs in fp32 under autocast; dy is a bf16 matmul's output, stored in 16 bits and
    widened by its readers, so the sum stays a kernel of its own (taken into the matmul, it was
    left outside it: eight ops ran eagerly at 512 rows). Gradients as close to eager's as eager's
    bf16 ones are to fp32."""
    torch.manual_seed(0)
    model = PreNorm("layernorm", d=64).train()
    ref, full = copy.deepcopy(model), copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    x = torch.randn(4, 128, 64, generator=torch.Generator().manual_seed(4))
    got, want, exact = _grads(cm, x, True), _grads(ref, x, True), _grads(full, x, False)
    for n in ("n1.weight", "n2.weight", "n1.bias"):
        err = float((got[n] - exact[n]).abs().max() / exact[n].abs().max())
        base = float((want[n] - exact[n]).abs().max() / exact[n].abs().max())
        assert err <= 2 * max(base, 1e-3), (n, err, base)
