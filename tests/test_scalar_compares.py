"""Comparisons in PyTorch's common dtype (capture/scalar_compares.py): a float32 tensor against the
Python float 0.1 compares with float32(0.1), an int32 tensor against a float as float32; torch-mlir
widened both to f64 (`x == 0.1` was false for x = float32(0.1)). And constant float tensors against
Python ints: torch-mlir's folder got `torch.full((), 1.7) > 1` and `torch.full((), 0.1) < 0` wrong
and crashed on a float64 splat. Compared with eager, every comparison."""
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


def _boundaries(dtype):
    """Values on either side of where float64 and the tensor's dtype disagree: 0.1 and 1e-5 as
    Python floats and as rounded to the dtype, zeros, NaN, and fresh random values."""
    exact = [0.1, 1e-5, 1.7, 1e4 + 0.3]
    rounded = [float(torch.tensor(v, dtype=dtype)) for v in exact]
    return torch.tensor(exact + rounded + [0.0, -0.0, float("nan"), 3.0], dtype=dtype), torch.randn(8).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64],
                         ids=["fp32", "fp16", "bf16", "fp64"])
def test_a_float_tensor_compares_with_a_python_float_in_its_own_dtype(dtype):
    def fn(x):
        return torch.stack([op(x, v) for v in (0.1, 1e-5, 1.7, 1e4 + 0.3, 3) for op in OPS])

    cm = uniorch.compile(fn, target="interpret")
    for x in _boundaries(dtype):
        got, want = cm(x), fn(x)
        assert torch.equal(got, want), (x, (got != want).nonzero().tolist())
    if dtype != torch.float64:  # compared in the tensor's dtype: no float64 arithmetic in the kernel
        (k,) = uniorch.explain(fn, x, target="interpret").kernels
        assert "f64" not in k.compute_types, k.compute_types


def test_an_int_tensor_compares_with_a_python_float_as_float32():
    def fn(i, x):
        return torch.stack([op(i, v) for v in (0.5, 16777216.0, -1.5) for op in OPS]), torch.where(x < 1e-5, 0.0, x)

    i = torch.tensor([0, 1, 16777217, 16777216, -1, -2, 2**30 + 1, 7], dtype=torch.int32)
    x = torch.tensor([1e-5, float(torch.tensor(1e-5)), 2e-5, 0.0, -1.0, 9.99e-6, 1.0, 5e-6])
    (g0, g1), (w0, w1) = uniorch.compile(fn, target="interpret")(i, x), fn(i, x)
    assert torch.equal(g0, w0), (g0 != w0).nonzero().tolist()
    assert torch.equal(g1, w1), (g1, w1)
