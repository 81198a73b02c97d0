"""What makes Triton's interpreter faster for uniorch's kernels, against torch on fresh random
inputs: reductions and scans with user combine functions a vector at a time
(backends/interpret/vector_reduce.py), no overflow checks that are thrown away
(backends/interpret/unchecked_overflow.py)."""
from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction, ReduceOps, ScanOps  # noqa: E402

from uniorch.backends.interpret import prepare_interpreter, vector_reduce  # noqa: E402

prepare_interpreter()  # as the loader does before the first interpreted kernel

R, C = 8, 16
jit = InterpretedFunction  # as the loader runs generated kernels on the interpreter (runtime/loader.py)


def _run(fn, *args):
    fn[(1,)](*args)


@jit
def _nan_max(a, b):
    return tl.where((a > b) | (a != a), a, b)


@jit
def _arg_max(va, ia, vb, ib):
    pick_a = (va >= vb) | (va != va)  # a tie keeps the left operand: the order of operands decides it
    return tl.where(pick_a, va, vb), tl.where(pick_a, ia, ib)


@jit
def _welford(ma, m2a, na, mb, m2b, nb):
    n = na + nb
    w = tl.where(n == 0, 0.0, nb / tl.where(n == 0, 1.0, n))
    d = mb - ma
    return ma + d * w, m2a + m2b + d * d * na * w, n


@jit
def _segmented_sum(va, fa, vb, fb):
    return tl.where(fb != 0, vb, va + vb), fa | fb


@jit
def _rows(x_ptr, max_ptr, arg_ptr, mean_ptr, var_ptr, all_ptr, keep_ptr,
          R: tl.constexpr, C: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + r * C + c)
    tl.store(max_ptr + tl.arange(0, R), tl.reduce(x, 1, _nan_max))
    idx = tl.full([R, C], 0, tl.int32) + c
    _, arg = tl.reduce((x, idx), 1, _arg_max)
    tl.store(arg_ptr + tl.arange(0, R), arg)
    mean, m2, n = tl.reduce((x, tl.full([R, C], 0.0, tl.float32), tl.full([R, C], 1.0, tl.float32)), 1, _welford)
    tl.store(mean_ptr + tl.arange(0, R), mean)
    tl.store(var_ptr + tl.arange(0, R), m2 / n)
    tl.store(all_ptr, tl.reduce(x, None, _nan_max))
    tl.store(keep_ptr + r * 0 + c, tl.reduce(x, 0, _nan_max, keep_dims=True))


@jit
def _scans(x_ptr, f_ptr, cmax_ptr, seg_ptr, R: tl.constexpr, C: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + r * C + c)
    f = tl.load(f_ptr + r * C + c)
    tl.store(cmax_ptr + r * C + c, tl.associative_scan(x, 1, _nan_max))
    seg, _ = tl.associative_scan((x, f), 1, _segmented_sum)
    tl.store(seg_ptr + r * C + c, seg)


def test_row_reductions_match_torch():
    x = torch.randn(R, C)
    x[2, 5] = float("nan")  # propagates, as torch.amax does
    x[3, :] = torch.randint(0, 3, (C,)).float()  # ties: the first index wins, as torch.argmax
    mx, arg, mean, var, allmax = (torch.empty(R), torch.empty(R, dtype=torch.int32), torch.empty(R),
                                  torch.empty(R), torch.empty(1))
    keep = torch.empty(1, C)
    _run(_rows, x, mx, arg, mean, var, allmax, keep, R, C)
    torch.testing.assert_close(mx, x.amax(1), equal_nan=True)
    ok = torch.arange(R) != 2
    assert torch.equal(arg[ok].long(), x[ok].argmax(1))
    assert arg[2] == 5
    torch.testing.assert_close(mean[ok], x[ok].mean(1))
    torch.testing.assert_close(var[ok], x[ok].var(1, unbiased=False))
    assert torch.isnan(allmax).all()
    torch.testing.assert_close(keep, x.amax(0, keepdim=True), equal_nan=True)


def test_scans_match_torch():
    x = torch.randn(R, C)
    flags = (torch.rand(R, C) < 0.3).to(torch.int32)
    flags[:, 0] = 1
    cmax, seg = torch.empty(R, C), torch.empty(R, C)
    _run(_scans, x, flags, cmax, seg, R, C)
    torch.testing.assert_close(cmax, torch.cummax(x, 1).values)
    want = x.clone()
    for j in range(1, C):
        want[:, j] = torch.where(flags[:, j] != 0, x[:, j], want[:, j - 1] + x[:, j])
    torch.testing.assert_close(seg, want)


def test_the_interpreter_no_longer_loops_per_element(monkeypatch):
    """The replaced methods are what runs, and they call the combine log2(n) times, not n."""
    assert ReduceOps.generic_reduce.__module__ == vector_reduce.__name__
    assert ScanOps.generic_scan.__module__ == vector_reduce.__name__
    calls = []
    real = vector_reduce._combine
    monkeypatch.setattr(vector_reduce, "_combine", lambda *a: calls.append(1) or real(*a))
    x = torch.randn(R, C)
    _run(_scans, x, torch.ones(R, C, dtype=torch.int32), torch.empty(R, C), torch.empty(R, C), R, C)
    assert len(calls) == 2 * 4  # two scans of 16: distances 1, 2, 4, 8


@jit
def _scalar_only(a, b):
    if a > b:  # Python control flow on a value: only a scalar can decide it
        return a
    return b


@jit
def _scalar_combine(x_ptr, out_ptr, C: tl.constexpr):
    tl.store(out_ptr, tl.reduce(tl.load(x_ptr + tl.arange(0, C)), 0, _scalar_only))


def test_a_combine_that_needs_scalars_runs_the_interpreters_loop():
    x = torch.randn(C)
    out = torch.empty(1)
    _run(_scalar_combine, x, out, C)
    assert out.item() == x.max().item()


@jit
def _index_math(x_ptr, out_ptr, C: tl.constexpr):
    i = tl.arange(0, C)
    x = tl.load(x_ptr + i)
    tl.store(out_ptr + i, x * 4 + i)


def test_integer_arithmetic_wraps_as_compiled_kernels_do_without_the_dropped_check():
    from triton.runtime import interpreter

    assert not interpreter.interpreter_builder.options.debug
    assert not interpreter.interpreter_builder.options.sanitize_overflow
    x = torch.randint(-2**31, 2**31 - 1, (C,), dtype=torch.int32)
    x[0] = 2**30  # x * 4 wraps to 0 in int32, as in torch and on a GPU
    out = torch.empty(C, dtype=torch.int32)
    _run(_index_math, x, out, C)
    assert torch.equal(out, x * 4 + torch.arange(C, dtype=torch.int32))
