"""fp16/bf16 norms, variances and softmax compute in fp32 and round once, as ATen's kernels do
(uniorch/capture/opmath.py): sums of squares of values ~300 overflowed fp16 before."""
import pytest
import torch

import uniorch

F = torch.nn.functional


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name,fn", [
    ("rms_norm", lambda x: F.rms_norm(x, [x.shape[-1]])),
    ("vector_norm", lambda x: torch.linalg.vector_norm(x, dim=-1)),
    ("var", lambda x: torch.var(x / 3, -1)),  # the result fits fp16; its sum of squares does not
    ("softmax", lambda x: torch.softmax(x / 100, -1)),
    ("group_norm", lambda x: F.group_norm(x.view(4, 8, 16), 2)),
])
def test_large_16bit_values_match_eager(dtype, name, fn):
    x = (torch.randn(4, 128) * 300).to(dtype)  # squares far beyond fp16's 65504
    cm = uniorch.compile(fn, target="interpret", fallback="error")
    got, ref = cm(x), fn(x)
    assert got.dtype == ref.dtype and torch.isfinite(ref).all()
    torch.testing.assert_close(got, ref, rtol=2e-2 if dtype == torch.bfloat16 else 2e-3, atol=1e-2)


def test_bfloat16_casts_on_the_interpreter():
    # Triton's interpreter reinterpreted int/f64 <-> bf16 casts as bits (backends/interpret/fixes.py)
    x = torch.tensor([[1.5, float("nan"), -8.5], [2.0, 3.0, float("nan")]], dtype=torch.bfloat16)
    cases = [lambda x: torch.nanmean(x), lambda x: torch.special.ndtr(x), lambda x: x.double() * 3,
             lambda x: (x * 1000).to(torch.int32), lambda x: x.half() + 1,
             lambda x: torch.arange(6).view(2, 3).to(torch.bfloat16) / 7]
    for fn in cases:
        got, ref = uniorch.compile(fn, target="interpret")(x), fn(x)
        assert got.dtype == ref.dtype
        torch.testing.assert_close(got, ref, equal_nan=True, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("reduce", ["amax", "sum", "index_add", "index_put"])
def test_bfloat16_accumulating_scatters_compile_through_fp32(reduce):
    # an embedding's or a max pool's backward in bf16: accumulated in fp32, rounded once
    def f(x, i, src):
        if reduce == "index_add":
            return x.index_add(0, i[:, 0], src)
        if reduce == "index_put":
            return x.index_put((i[:, 0],), src, accumulate=True)
        return x.scatter_reduce(0, i, src, reduce)

    gen = torch.Generator().manual_seed(3)
    x, src = torch.randn(5, 3, generator=gen).bfloat16(), torch.randn(64, 3, generator=gen).bfloat16()
    i = torch.randint(0, 5, (64, 3), generator=gen)
    cm = uniorch.compile(f, target="interpret")
    got, want = cm(x, i, src), f(x, i, src)
    exact = f(x.double(), i, src.double())
    assert got.dtype == torch.bfloat16
    # no farther from the exact sum than eager's bf16 accumulation, which rounds at every add
    assert (got.double() - exact).abs().max() <= max((want.double() - exact).abs().max(), 2 ** -7 * exact.abs().max())
    rep = cm.explain(x, i, src)
    assert not rep.fallbacks and any(k.kind == "scatter" for k in rep.kernels), str(rep)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name,fn,min_equal", [
    # the rest: erf's and x / sqrt(2)'s last fp32 bit against ATen's, whose vectorised fp16/bf16
    # GELU is itself the correctly rounded value only 92% of the time (94.8% equal in fp16 with the
    # packages of 2026-12-05, 95% before): judged against float64 too, below
    ("gelu", F.gelu, 0.93),
    ("sigmoid", torch.sigmoid, 0.99),
    ("elu", F.elu, 0.99),
    ("selu", F.selu, 0.99),
])
def test_16bit_activations_round_once_as_eager(dtype, name, fn, min_equal):
    """torch-mlir lowers these as several steps in the input type, each rounded to 16 bits; ATen's
    kernels compute in fp32 and round once. Before, 57% of a bf16 GELU's outputs equalled eager's
    (sigmoid 67%, SELU 25%) and the largest error was up to 2.4x eager's. Fresh inputs, both
    dtypes: nearly every output is eager's own, and no error exceeds eager's against float64."""
    torch.manual_seed(5)
    x = (torch.randn(256, 256) * 3).to(dtype)
    cm = uniorch.compile(fn, target="interpret", fallback="error")
    got, ref, exact = cm(x), fn(x), fn(x.double())
    assert got.dtype == ref.dtype
    assert float((got == ref).float().mean()) >= min_equal
    # rounded once from fp32: the float64 value rounded to 16 bits at least as often as eager's
    rounded = exact.to(dtype)
    assert float((got == rounded).float().mean()) >= float((ref == rounded).float().mean()) - 0.005
    err, eager_err = (got.double() - exact).abs().max(), (ref.double() - exact).abs().max()
    assert err <= eager_err * 1.01, (float(err), float(eager_err))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name,fn", [
    ("mul", lambda x: x * 0.1),
    ("rmul", lambda x: 0.3 * x),
    ("div", lambda x: x / 0.3),
    ("mul_exact", lambda x: x * 0.125),    # held exactly by both types: unchanged
    ("leaky_relu", lambda x: F.leaky_relu(x, 0.01)),
])
def test_16bit_times_a_python_float_as_eager(dtype, name, fn):
    """ATen keeps a Python scalar at opmath precision; torch-mlir rounded it to the tensor's type
    first (bf16 0.1 is 0.10009765625): 20% of bf16 x * 0.1 (35% in fp16) and 10-15% of leaky_relu's
    negative outputs differed from eager's. Now every element is eager's."""
    torch.manual_seed(7)
    x = torch.randn(4096).to(dtype)
    got, ref = uniorch.compile(fn, target="interpret", fallback="error")(x), fn(x)
    assert got.dtype == ref.dtype and torch.equal(got, ref)


def test_fp16_product_of_normalized_operands_compiles():
    """CLIP-style cosine similarity in fp16: a norm's zero guard (`tl.where(c, 0.0, h)`) made the
    B tile fp32 in Triton, which rejected tl.dot(fp16, fp32); the product ran in PyTorch."""
    import torch.nn.functional as F

    def fn(a, b):
        return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).transpose(-1, -2)

    a, b = torch.randn(2, 5, 8).half(), torch.randn(2, 6, 8).half()
    cm = uniorch.compile(fn)
    torch.testing.assert_close(cm(a, b).float(), fn(a, b).float(), rtol=2e-3, atol=2e-3)
    assert not cm.explain(a, b).fallbacks
