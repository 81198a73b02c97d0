"""Kernel names are unique across what one call or one training step launches.

A profiler (torch.profiler, nsys, ncu) sees only the launched function's name. Before, every
compiled graph named its kernels k0, k1, ...: the forward's `k1_contraction` and the backward's
were one row of the profile, and the benchmark gave both the sum (H200 runs 5 and 6). Now the
second region of a program is `r1_`, a backward `bw_`, an optimizer's update `opt_`, and each name
is the Triton function the profiler reports.
"""
from __future__ import annotations

import re

import torch

import uniorch


def _defines(name: str, source: str) -> bool:
    return re.search(rf"def\s+{re.escape(name)}\s*\(", source) is not None


def _split_by_an_eager_op(x):
    y = torch.relu(x) * 2
    z = torch.sin(y)  # left to PyTorch by the test: two regions around it
    return torch.tanh(z) + x


def test_regions_of_one_program_name_their_kernels_apart(monkeypatch):
    from uniorch.runtime import eager_only

    monkeypatch.setitem(eager_only.EAGER_ONLY, torch.ops.aten.sin.default, "left to PyTorch by the test")
    cm = uniorch.compile(_split_by_an_eager_op, "interpret")
    x = torch.randn(4, 8)
    torch.testing.assert_close(cm(x), _split_by_an_eager_op(x))
    rep = cm.explain(x)
    names = [k.name for k in rep.kernels]
    assert names == ["k0_pointwise", "r1_k0_pointwise"], names
    assert all(_defines(k.name, k.source) for k in rep.kernels)
    assert [f.op for f in rep.fallbacks] == ["aten.sin.default"]


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x))) + x


def test_a_training_step_names_forward_backward_and_optimizer_kernels_apart():
    torch.manual_seed(0)
    model, ref = _Block(), _Block()
    ref.load_state_dict(model.state_dict())
    cm = uniorch.compile(model, "interpret")
    opt = uniorch.compile(torch.optim.AdamW(model.parameters(), lr=1e-2), "interpret")
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    x = torch.randn(8, 16)
    for m, o in ((cm, opt), (ref, ref_opt)):
        o.zero_grad()
        m(x).pow(2).mean().backward()
        o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q)
    rep = cm.explain(x)
    kernels = rep.kernels + rep.backward.kernels + opt.explain().kernels
    names = [k.name for k in kernels]
    assert len(set(names)) == len(names), names
    assert all(not n.startswith(("bw", "opt")) for n in (k.name for k in rep.kernels)), names
    assert rep.backward.kernels and all(k.name.startswith("bw_k") for k in rep.backward.kernels), names
    assert all(k.name.startswith("opt_k") for k in opt.explain().kernels), names
    assert all(_defines(k.name, k.source) for k in kernels)
