"""Integer powers (capture/integer_power.py) compile and equal eager bit for bit, wrapping on
overflow as eager's integer arithmetic does; torch-mlir lowers no `pow` of integer tensors, so
each ran in PyTorch."""
import pytest
import torch

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_INTS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8]


def _ints(dtype, *shape, lo=-9, hi=10):
    return torch.randint(0 if dtype == torch.uint8 else lo, hi, shape).to(dtype)


@pytest.mark.parametrize("dtype", _INTS)
def test_python_exponents(dtype):
    def fn(x):
        return x ** 2 + x ** 3, x ** 0 + x ** 1, x ** 37, x.pow(5)  # 37: wraps around

    x = _ints(dtype, 5, 7)
    cm = uniorch.compile(fn, target="interpret")
    x = _ints(dtype, 5, 7)
    for got, want in zip(cm(x), fn(x)):
        assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
    assert not cm.explain(x).fallbacks


@pytest.mark.parametrize("dtype", _INTS)
def test_tensor_exponents_and_a_number_base(dtype):
    def fn(x, e):
        return torch.pow(x, e), 3 ** e, torch.pow(x, e - 4 if dtype.is_signed else e)

    cm = uniorch.compile(fn, target="interpret")
    x, e = _ints(dtype, 6, 8), _ints(dtype, 6, 8, lo=0, hi=70)
    x[0, :3] = torch.tensor([1, -1 if dtype.is_signed else 2, 0])  # ATen's answers for negative exponents
    for got, want in zip(cm(x, e), fn(x, e)):
        assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
    assert not cm.explain(x, e).fallbacks


def test_negative_python_exponent_raises_eagers_error():
    x = torch.arange(4)
    with pytest.raises(RuntimeError, match="negative integer powers"):
        x ** -1
    with pytest.raises(RuntimeError, match="negative integer powers"):
        uniorch.compile(lambda x: x ** -1, target="interpret")(x)
