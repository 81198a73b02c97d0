"""Constant float tensors compared with Python ints (capture/scalar_compares.py): torch-mlir's
folder got `torch.full((), 1.7) > 1` and `torch.full((), 0.1) < 0` wrong and crashed on a float64
splat. Compared with eager, every comparison, float32/float64/bfloat16."""
import pytest
import torch

import uniorch

OPS = [torch.lt, torch.le, torch.gt, torch.ge, torch.eq, torch.ne]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=["fp32", "fp64", "bf16"])
def test_constant_splat_against_an_int(dtype):
    values = [0.1, -0.1, 1.7, 1.0, -2.5, 0.0]

    def fn(a):
        outs = [op(torch.full((), v, dtype=dtype), k) for v in values for k in (0, 1, -2) for op in OPS]
        return torch.stack(outs), a < 1  # a computed input keeps the call compiled

    got, want = uniorch.compile(fn, target="interpret")(torch.randn(4)), fn(torch.randn(4))
    assert torch.equal(got[0], want[0]), (got[0] != want[0]).nonzero().flatten().tolist()
