"""Integer floor division is exact over the whole integer range (capture/integer_division.py):
`a // b`, `torch.div(rounding_mode="floor")`, `floor_divide` and scalar divisors against eager, on
fresh random values up to the dtype's limits, with no float arithmetic in the kernel. Before, the
quotient went through float64 and `(2**53 + 1) // 3` was one less than eager's."""
import pytest
import torch

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _values(dtype, n=64):
    info = torch.iinfo(dtype)
    lo = info.min + 1 if info.min < 0 else 0  # min // -1 overflows in eager too
    big = torch.randint(lo, info.max, (n,), dtype=torch.int64).to(dtype)
    edges = torch.tensor([lo, info.max, 0, 1, 2**53 + 1 if dtype == torch.int64 else 1], dtype=torch.int64).to(dtype)
    return torch.cat([big, edges])


def _divisors(dtype, n):
    d = _values(dtype, n)[:n]
    small = torch.randint(-9 if torch.iinfo(dtype).min < 0 else 1, 10, (n,), dtype=torch.int64).to(dtype)
    d = torch.where(torch.rand(n) < 0.5, small, d)
    return torch.where(d == 0, torch.ones_like(d), d)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_floor_division_exact(dtype):
    a = _values(dtype)
    b = _divisors(dtype, a.numel())

    def fn(a, b):
        return a // b, torch.div(a, b, rounding_mode="floor"), torch.floor_divide(a, b), a % b

    cm = uniorch.compile(fn, target="interpret")
    for got, want in zip(cm(a, b), fn(a, b)):
        assert got.dtype == want.dtype
        assert torch.equal(got, want), (a[got != want], b[got != want], got[got != want], want[got != want])
    rep = cm.explain(a, b)
    assert not rep.fallbacks
    assert not [k.name for k in rep.kernels if any(t.startswith("f") for t in k.compute_types)], rep


@pytest.mark.parametrize("divisor", [3, -3, 7, 1, -1])
def test_floor_division_by_scalar(divisor):
    a = _values(torch.int64)

    def fn(a):
        return a // divisor, torch.div(a, divisor, rounding_mode="floor")

    cm = uniorch.compile(fn, target="interpret")
    for got, want in zip(cm(a), fn(a)):
        assert torch.equal(got, want), (a[got != want], got[got != want], want[got != want])


def test_mixed_int_dtypes_and_broadcast():
    a = _values(torch.int64).reshape(-1, 1)[:16]
    b = _divisors(torch.int32, 5).reshape(1, 5)

    def fn(a, b):
        return a // b

    got, want = uniorch.compile(fn, target="interpret")(a, b), fn(a, b)
    assert got.dtype == want.dtype and torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_floor_division_is_eagers(dtype):
    """Eager floors the exact quotient (a - fmod(a, b)) / b, not the rounded a / b: 1.0 // 0.1 is 9
    in float32, where floor(1.0 / 0.1) is 10 (random inputs hit such a case about once in 40 runs
    of 40 elements). Signs, zeros, infinities and a zero divisor as eager."""
    fixed_a = torch.tensor([1.0, -1.0, 7.0, 0.0, -0.0, 3.0, -3.0, 5.0, float("inf"), 2.0])
    fixed_b = torch.tensor([0.1, 0.1, -0.7, 2.0, 2.0, 0.0, 0.0, float("inf"), 3.0, -float("inf")])
    a = torch.cat([fixed_a, torch.randn(200) * 100]).to(dtype)
    b = torch.cat([fixed_b, torch.randn(200)]).to(dtype)

    def fn(a, b):
        return a // b, torch.div(a, b, rounding_mode="floor"), a // 0.1, torch.floor_divide(a, -3)

    for got, want in zip(uniorch.compile(fn, target="interpret")(a, b), fn(a, b)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_floor_division_is_eagers(dtype):
    """ATen runs div_floor_floating's steps in the 16-bit type (each rounded), and takes a Python
    divisor at fp32: bf16 2.984 // 0.9961 is 2, where the floor of the rounded quotient was 3, and
    a bf16 13.81 // 0.1 is 138, where a divisor rounded to bf16 gives 137. bf16 matches eager's
    every element; in fp16 eager's vectorized CPU path rounds some steps apart from ATen's scalar
    code (0.1% of these differ): there ours is no farther from the float64 quotient than eager's."""
    torch.manual_seed(6)
    a, b = (torch.randn(4096) * 20).to(dtype), (torch.randn(4096) * 3).to(dtype)
    a[:2], b[:2] = torch.tensor([2.984375, 13.8125]), torch.tensor([0.99609375, 0.1])
    b[::7], a[::11] = 0, 0

    def fn(a, b):
        return a // b, torch.div(a, b, rounding_mode="floor"), a // 0.1, torch.floor_divide(a, -0.3)

    for got, want, exact in zip(uniorch.compile(fn, target="interpret")(a, b), fn(a, b), fn(a.double(), b.double())):
        assert got.dtype == want.dtype
        same = (got == want) | (got.isnan() & want.isnan())
        if dtype == torch.bfloat16:
            assert bool(same.all()), (a[~same][:4], b[~same][:4])
        else:
            assert float(same.float().mean()) >= 0.99
            assert bool(((got.double() - exact).abs() <= (want.double() - exact).abs())[~same].all())


def test_16bit_nextafter_is_eagers():
    """The next bf16/fp16 value is not the next float32 one rounded back (that is x itself: every
    element came back unchanged): the op runs eagerly for 16-bit types, and explain says so."""
    x = torch.tensor([1.0, 2.0, -3.0, 0.0])
    y = torch.tensor([2.0, 0.0, 5.0, 1.0])
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        cm = uniorch.compile(torch.nextafter, target="interpret")
        got, want = cm(x.to(dtype), y.to(dtype)), torch.nextafter(x.to(dtype), y.to(dtype))
        assert torch.equal(got, want) and not torch.equal(got, x.to(dtype))
        fallbacks = cm.explain(x.to(dtype), y.to(dtype)).fallbacks
        assert [f.op for f in fallbacks] == ([] if dtype == torch.float32 else ["aten.nextafter.default"])


def test_division_by_zero_raises_eagers_error():
    """Eager raises ZeroDivisionError for an integer zero divisor; the compiled call checks the
    divisor after its kernels and runs eagerly, raising the same error. Non-zero divisors stay compiled."""
    fn = lambda a, b: a // b  # noqa: E731
    cm = uniorch.compile(fn, target="interpret")
    a, b = torch.tensor([7, -7, 5]), torch.tensor([2, 3, 0])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(a, b)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        cm(a, b)
    ok = torch.tensor([2, 3, -4])
    assert torch.equal(cm(a, ok), fn(a, ok))
    assert not cm.explain(a, ok).fallbacks


def test_constant_divisor_needs_no_check():
    a = _values(torch.int64)
    rep = uniorch.explain(lambda a: a // 3, a, target="interpret")
    assert not rep.checks and len(rep.kernels) == 1, str(rep)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        uniorch.compile(lambda a: a // 0, target="interpret")(a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_fmod_is_exact(dtype):
    """torch.fmod is IEEE fmod: fmod(1.0, 0.1) is 0.0999..., not 1.0 - 10 * 0.1 (which the rounded
    quotient gives: 0.0), fmod(x, inf) is x, and the result has the dividend's sign."""
    a = torch.cat([torch.tensor([1.0, -1.0, 7.0, -0.0, 5.0, -5.0, float("inf"), 3.0]), torch.randn(100) * 50]).to(dtype)
    b = torch.cat([torch.tensor([0.1, 0.1, -0.7, 2.0, float("inf"), -float("inf"), 3.0, 0.0]), torch.randn(100)]).to(dtype)

    def fn(a, b):
        return torch.fmod(a, b), torch.fmod(a, 0.3), a.fmod(-2)

    for got, want in zip(uniorch.compile(fn, target="interpret")(a, b), fn(a, b)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_integer_fmod_compiles_and_is_eagers(dtype):
    """Integer fmod (C's %: the dividend's sign) ran in PyTorch: torch-mlir does not lower it."""
    a = _values(dtype)
    b = _divisors(dtype, a.numel())

    def fn(a, b):
        return torch.fmod(a, b), torch.fmod(a, 3), a.fmod(7)

    cm = uniorch.compile(fn, target="interpret")
    for got, want in zip(cm(a, b), fn(a, b)):
        assert got.dtype == want.dtype and torch.equal(got, want)
    assert not cm.explain(a, b).fallbacks
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        cm(a, torch.zeros_like(b))


_BYTE_OPS = {
    "mul": lambda x: x * 3, "sub": lambda x: x - 3, "rsub": lambda x: 3 - x, "remainder": lambda x: x % 3,
    "floordiv": lambda x: x // 2, "trunc_div": lambda x: torch.div(x, 2, rounding_mode="trunc"),
    "mul_wide": lambda x: x * 300, "remainder_wide": lambda x: x % 300, "zero_point": lambda x: (x - 7) * 5,
}


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8])
@pytest.mark.parametrize("name", sorted(_BYTE_OPS))
def test_byte_arithmetic_wraps_as_eager(name, dtype):
    """int8/uint8 times, minus, modulo or divided by a number (quantization's zero points and
    scales) crashed the process in torch-mlir's lowering; computed in int32 and cast back."""
    fn = _BYTE_OPS[name]
    info = torch.iinfo(dtype)
    x = torch.randint(info.min, info.max + 1, (64,), dtype=dtype)
    x[:4] = torch.tensor([info.min, info.max, 0, 1], dtype=dtype)
    cm = uniorch.compile(fn, fallback="error")
    assert torch.equal(cm(x), fn(x))
