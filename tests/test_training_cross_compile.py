"""The training path's forward and backward graphs cross-compile for every GPU backend: the halves
AOTAutograd gives uniorch (min-cut partition, as runtime/training.py asks for) go through
`compile_aot` for cuda:sm_90 (cubins checked by ptxas) and rocm:gfx942 (hsaco), every op in a kernel."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch


class Block(nn.Module):
    """Pre-LN transformer MLP and a conv-BN-ReLU: matmuls with prologues and epilogues, a
    normalisation's backward, a convolution's weight and input gradients."""

    def __init__(self):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(16), nn.Linear(16, 32), nn.Linear(32, 16)
        self.conv, self.bn = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)

    def forward(self, x, img):
        h = x + self.down(F.gelu(self.up(self.norm(x))))
        c = torch.relu(self.bn(self.conv(img)))
        return h.pow(2).mean() + c.mean()


def _halves():
    """(forward, backward) FX graphs with real example inputs, as the training backend gets them
    (tools/bench/spills.py `training_halves`, which the spill check cross-compiles too)."""
    from uniorch.tools.bench.spills import training_halves

    torch.manual_seed(0)
    got = training_halves(Block(), (torch.randn(2, 5, 16), torch.randn(2, 3, 6, 6)))
    assert [h for h, _, _ in got] == ["fwd", "bwd"], [h for h, _, _ in got]
    return [(gm, list(inputs)) for _, gm, inputs in got]


@pytest.fixture(scope="module")
def halves():
    return _halves()


@pytest.mark.parametrize("target,binary", [("cuda:sm_90", "cubin"), ("rocm:gfx942", "hsaco")])
@pytest.mark.parametrize("which", ["forward", "backward"])
def test_training_halves_cross_compile(halves, target, binary, which):
    gm, inputs = halves[0 if which == "forward" else 1]
    art = uniorch.compile_aot(gm, tuple(inputs), target, fallback="error")
    assert not art.fallbacks, art.fallbacks
    assert art.kernels and all(k.asm[binary][:4] == b"\x7fELF" for k in art.kernels)
    if which == "backward":  # the backward has matmuls (weight and input gradients) and a convolution's
        assert sum(k.kind == "contraction" for k in art.kernels) >= 3, [k.kind for k in art.kernels]
