"""Counting, scan and segment ops torch-mlir cannot lower, rewritten at capture
(uniorch/capture/counting.py): logcumsumexp, mode, histc, histogram, histogramdd and
segment_reduce. Each runs in Triton's interpreter against eager PyTorch on fresh inputs built to
hit the hard cases (infinities and NaNs in scans, ties and signed zeros in mode, values exactly on
bin edges, empty segments), and must leave nothing to eager. Several ops share one compiled
function where they can, to keep the file fast."""
import math

import pytest
import torch

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")

INF, NAN = math.inf, math.nan


def _run(fn, *args):
    """Compiled and eager results, as flat tuples, after checking nothing ran eagerly."""
    cm = uniorch.compile(fn, target="interpret")
    out = cm(*args)
    rep = cm.explain(*args)
    assert not rep.fallbacks, rep.fallbacks
    ref = fn(*args)

    def flat(r):
        return tuple(t for item in r for t in flat(item)) if isinstance(r, (tuple, list)) else (r,)

    out, ref = flat(out), flat(ref)
    assert len(out) == len(ref)
    return out, ref


def _close(out, ref, rtol=1e-5, atol=1e-6):
    assert out.dtype == ref.dtype and out.shape == ref.shape, (out.dtype, ref.dtype, out.shape, ref.shape)
    torch.testing.assert_close(out, ref, rtol=rtol, atol=atol, equal_nan=True)


def _exact(out, ref):
    """Bit-for-bit up to NaN payloads, zero signs included."""
    assert out.dtype == ref.dtype and out.shape == ref.shape, (out, ref)
    if ref.is_floating_point():
        assert torch.equal(out.isnan(), ref.isnan()), (out, ref)
        assert torch.equal(out.nan_to_num(), ref.nan_to_num()), (out, ref)
        assert torch.equal(out.signbit(), ref.signbit()), (out, ref)
    else:
        assert torch.equal(out, ref), (out, ref)


# ---- logcumsumexp ----------------------------------------------------------------------------

def test_logcumsumexp_stable_with_infinities_and_nans():
    """|x| up to 300 (exp overflows fp32 there: torch-mlir's log(cumsum(exp)) gave inf), a prefix
    of only -inf (-inf), +inf (inf from there on) and a NaN (NaN from there on)."""
    x = torch.randn(5, 9) * 100
    x[0, :3] = -INF
    x[1, 4] = INF
    x[2, 2] = NAN
    x[3] = torch.tensor([300.0, -300.0, 299.0, 0.0, -INF, 301.0, 5.0, INF, -INF])
    out, ref = _run(lambda x: (torch.logcumsumexp(x, 1), torch.logcumsumexp(x, 0)), x)
    for o, r in zip(out, ref):
        _close(o, r)


def test_logcumsumexp_half_computes_in_fp32():
    x = (torch.randn(3, 2, 12) * 20).half()
    (out,), (ref,) = _run(lambda x: torch.logcumsumexp(x, -1), x)
    _close(out, ref, rtol=1e-3, atol=1e-3)


# ---- mode ------------------------------------------------------------------------------------

def _check_mode(out, ref, x, dim, keepdim=False):
    """Values bit-exact (the signed zero ATen returns included); indices may be any occurrence
    of the value (ATen's sort is not stable), so they must gather the same value."""
    _exact(out[0], ref[0])
    index = out[1] if keepdim else out[1].unsqueeze(dim)
    gathered = torch.gather(x, dim, index)
    _exact(gathered if keepdim else gathered.squeeze(dim), ref[0])


def test_mode_ties_signed_zeros_and_dtypes():
    x = torch.randint(-3, 3, (4, 7, 5)).float()
    x[0, :, 0] = torch.tensor([0.0, -0.0, 1.0, 1.0, -0.0, 2.0, 2.0])  # three zeros, both signs
    xi = torch.randint(-4, 4, (6, 9))
    xb = torch.rand(5, 6) > 0.5

    def fn(x, xi, xb):
        return torch.mode(x, 1), torch.mode(x, -1, keepdim=True), torch.mode(xi), torch.mode(xb, 0)

    cm = uniorch.compile(fn, target="interpret")
    out = cm(x, xi, xb)
    assert not cm.explain(x, xi, xb).fallbacks
    ref = fn(x, xi, xb)
    _check_mode(out[0], ref[0], x, 1)
    _check_mode(out[1], ref[1], x, 2, keepdim=True)
    _check_mode(out[2], ref[2], xi, 1)
    _check_mode(out[3], ref[3], xb, 0)


def test_mode_long_row_and_nan_rows():
    """Rows past the all-pairs limit (sort, not n^2); rows of NaNs and a NaN among numbers (the
    numbers win; NaN only when nothing else is there)."""
    x = torch.randint(-50, 50, (1500,)).float()
    y = torch.tensor([[NAN, 2.0, 2.0, 1.0], [NAN, NAN, NAN, NAN], [3.0, NAN, 1.0, 2.0]])
    out, ref = _run(lambda x, y: (torch.mode(x), torch.mode(y, 1)), x, y)
    _check_mode(out[:2], ref[:2], x, 0)
    _check_mode(out[2:], ref[2:], y, 1)


# ---- histograms ------------------------------------------------------------------------------

def _on_edges(*shape, scale=10):
    """Values on a grid of step 1/scale, so many land exactly on bin edges and range ends."""
    return torch.randint(-20, 40, shape).float() / scale


def test_histc_edges_and_ranges():
    """Explicit range (values outside and on both ends, NaN skipped), the data's range (min == max
    == 0), and a constant input (its range widened by 1)."""
    x = _on_edges(300)
    x[:3] = torch.tensor([NAN, -1.3, 2.9])
    fn = lambda x, c: (torch.histc(x, 7, -1.3, 2.9), torch.histc(x[3:], 13), torch.histc(c, 4))  # noqa: E731
    out, ref = _run(fn, x, torch.full((5,), 2.0))
    for o, r in zip(out, ref):
        _exact(o, r)


def test_histogram_bin_counts_weights_density_and_edge_tensor():
    x = _on_edges(200, scale=3)
    w = torch.rand(200)
    b = torch.tensor([-2.0, -0.5, 0.0, 1.0 / 3.0, 4.0])

    def fn(x, w, b):
        return (torch.histogram(x, 11), torch.histogram(x, 10, range=(-1.0, 2.0), weight=w, density=True),
                torch.histogram(x, b))

    out, ref = _run(fn, x, w, b)
    _exact(out[0], ref[0])
    for o, r in zip(out[1:], ref[1:]):
        _close(o, r)


def test_histogramdd_counts_and_edge_tensors():
    x = _on_edges(5, 20, 2)
    w = torch.rand(5, 20)
    e0, e1 = torch.tensor([-1.0, 0.0, 0.5, 3.0]), torch.tensor([-2.0, 1.0, 2.0])

    def fn(x, w, e0, e1):
        return (torch.histogramdd(x, [5, 3]), torch.histogramdd(x, [3, 2], weight=w, density=True),
                torch.histogramdd(x, [e0, e1]))

    out, ref = _run(fn, x, w, e0, e1)
    _exact(out[0], ref[0])
    for o, r in zip(out[1:], ref[1:]):
        _close(o, r)


# ---- segment_reduce --------------------------------------------------------------------------

REDUCTIONS = ("sum", "mean", "max", "min", "prod")


def test_segment_reduce_lengths_with_empty_segments_and_nans():
    """Every reduction, with and without `initial`: empty segments give the initial value or
    ATen's default (0, NaN for mean, -inf/+inf, 1); a NaN poisons its segment."""
    data = torch.randn(8, 3)
    data[1, 0] = NAN
    lengths = torch.tensor([2, 0, 4, 2, 0])

    def fn(d, lengths):
        plain = [torch.segment_reduce(d, r, lengths=lengths) for r in REDUCTIONS]
        init = [torch.segment_reduce(d, r, lengths=lengths, initial=0.5) for r in REDUCTIONS]
        return plain + init

    out, ref = _run(fn, data, lengths)
    for o, r in zip(out, ref):
        _close(o, r)


def test_segment_reduce_offsets_and_inner_axis():
    data = torch.randn(7)
    offsets = torch.tensor([0, 2, 2, 6, 7])
    batched = torch.randn(3, 6, 2)
    lengths = torch.tensor([[1, 5, 0], [2, 2, 2], [6, 0, 0]])
    fn = lambda d, o, b, lengths: (torch.segment_reduce(d, "max", offsets=o, initial=2.0),  # noqa: E731
                                   torch.segment_reduce(d, "mean", offsets=o),
                                   torch.segment_reduce(b, "mean", lengths=lengths, axis=1),
                                   torch.segment_reduce(b, "min", lengths=lengths, axis=1))
    out, ref = _run(fn, data, offsets, batched, lengths)
    for o, r in zip(out, ref):
        _close(o, r)
