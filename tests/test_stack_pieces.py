"""`torch.stack` of computed tensors (passes/stack_pieces.py): GPT-J's interleaved rotary and a
plain stack of three pointwise results are one kernel each, with no copy kernel writing the stack;
compared with eager on fresh random inputs in fp32 and bf16."""
from __future__ import annotations

import os

import pytest
import torch
from torch import nn

import uniorch


class InterleavedRotary(nn.Module):
    """GPT-J: even/odd channels rotated, stacked and flattened back; cos/sin broadcast over heads."""

    def forward(self, x, cos, sin):
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class StackThree(nn.Module):
    def forward(self, a, b):
        return torch.stack((a + b, a * b, torch.tanh(a - b)), dim=1)


CASES = [
    (InterleavedRotary, lambda dt: (torch.randn(2, 5, 3, 8, dtype=dt), torch.randn(5, 1, 4, dtype=dt),
                                    torch.randn(5, 1, 4, dtype=dt))),
    (StackThree, lambda dt: (torch.randn(4, 6, dtype=dt), torch.randn(4, 6, dtype=dt))),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("cls,make", CASES, ids=[c.__name__ for c, _ in CASES])
def test_stack_of_computed_pieces_is_one_kernel(cls, make, dtype):
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    model = cls()
    cm = uniorch.compile(model, target="interpret")
    rep = cm.explain(*make(dtype))
    assert not rep.fallbacks, str(rep)
    assert [k.kind for k in rep.kernels] == ["pointwise"], str(rep)
    xs = make(dtype)
    out = xs[0].new_empty(model(*xs).shape)
    assert rep.kernels[0].bytes_written == out.numel() * out.element_size(), str(rep)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(cm(*xs), model(*xs), **tol)


class SameTwice(nn.Module):
    """One computed value concatenated with itself (rotary tables built as `cat((f, f), -1)` after
    the cos): the concatenation rewrites erased it twice, and MLIR aborted the process
    (passes/concat_pieces.py before this test; passes/stack_pieces.py takes no such pieces)."""

    def forward(self, f):
        e = f.cos()
        return torch.cat((e, e), -1) * 2


def test_value_concatenated_with_itself_compiles():
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    cm = uniorch.compile(SameTwice(), target="interpret")
    f = torch.randn(6, 4)
    rep = cm.explain(f)
    assert not rep.fallbacks, str(rep)
    torch.testing.assert_close(cm(f), SameTwice()(f), rtol=1e-5, atol=1e-5)
