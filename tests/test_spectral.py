"""FFTs as DFT contractions (capture/spectral.py): every torch.fft transform and stft against
eager PyTorch on fresh random inputs, first as the decompositions themselves (cheap: all modes),
then captured (no fft op may remain) and compiled in Triton's interpreter (a few shapes)."""
import math

import pytest
import torch

import uniorch
from uniorch.capture import capture
from uniorch.capture.spectral import MAX_N, TABLE

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

aten = torch.ops.aten
FFT = torch.fft


def _real(*shape):
    return torch.randn(*shape)


def _cplx(*shape):
    return torch.randn(*shape, dtype=torch.complex64)  # DC and Nyquist bins with imaginary parts


def _close(got, ref):
    """FFT outputs sum n terms: the absolute error scales with the largest output."""
    assert got.dtype == ref.dtype and got.shape == ref.shape, (got.dtype, got.shape, ref.dtype, ref.shape)
    scale = max(1.0, ref.abs().max().item()) if ref.numel() else 1.0
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5 * scale)


def _decomposed(fn, *args, **kwargs):
    """Runs `fn` (a torch.fft function) through its table entry, in eager."""
    op = getattr(aten, fn.__name__).default
    out = TABLE[op](*args, **kwargs)
    assert out is not NotImplemented, fn.__name__
    return out


# (torch.fft function, input maker, kwargs): n/s padding and trimming, dims, real and complex
CASES = {
    "fft_real": (FFT.fft, lambda: _real(3, 8), {}),
    "fft_complex_pad": (FFT.fft, lambda: _cplx(5, 3), {"n": 7, "dim": 0}),
    "ifft_complex_trim": (FFT.ifft, lambda: _cplx(2, 9), {"n": 6}),
    "ifft_real": (FFT.ifft, lambda: _real(4, 7), {}),
    "rfft_odd": (FFT.rfft, lambda: _real(4, 7), {}),
    "rfft_pad_dim0": (FFT.rfft, lambda: _real(5, 3), {"n": 8, "dim": 0}),
    "irfft": (FFT.irfft, lambda: _cplx(3, 5), {}),
    "irfft_odd_n": (FFT.irfft, lambda: _cplx(3, 5), {"n": 9}),
    "irfft_trim": (FFT.irfft, lambda: _cplx(6, 2), {"n": 5, "dim": 0}),
    "irfft_real_input": (FFT.irfft, lambda: _real(2, 6), {}),
    "hfft": (FFT.hfft, lambda: _cplx(3, 5), {}),
    "hfft_n": (FFT.hfft, lambda: _cplx(4, 6), {"n": 7}),
    "ihfft": (FFT.ihfft, lambda: _real(4, 7), {}),
    "ihfft_pad": (FFT.ihfft, lambda: _real(3, 5), {"n": 8}),
    "fft2_real": (FFT.fft2, lambda: _real(2, 5, 6), {}),
    "fft2_complex_s": (FFT.fft2, lambda: _cplx(2, 5, 4), {"s": (3, 6)}),
    "ifft2": (FFT.ifft2, lambda: _cplx(2, 5, 4), {}),
    "fftn_all": (FFT.fftn, lambda: _cplx(2, 5, 4), {}),
    "fftn_dims": (FFT.fftn, lambda: _real(2, 5, 6), {"dim": (0, 2)}),
    "ifftn_one_dim": (FFT.ifftn, lambda: _real(2, 5, 6), {"dim": (1,)}),
    "rfft2": (FFT.rfft2, lambda: _real(3, 5, 6), {}),
    "rfftn_s": (FFT.rfftn, lambda: _real(2, 5, 6), {"s": (4, 7)}),
    "irfft2_s": (FFT.irfft2, lambda: _cplx(2, 5, 4), {"s": (4, -1)}),
    "irfftn": (FFT.irfftn, lambda: _cplx(2, 5, 4), {}),
    "irfftn_s_dims": (FFT.irfftn, lambda: _cplx(2, 5, 4), {"s": (3, 7), "dim": (0, 2)}),
    "hfft2_s": (FFT.hfft2, lambda: _cplx(2, 5, 4), {"s": (6, 5)}),
    "hfftn": (FFT.hfftn, lambda: _cplx(2, 5, 4), {}),
    "ihfft2_s": (FFT.ihfft2, lambda: _real(2, 5, 6), {"s": (3, 5)}),
    "ihfftn": (FFT.ihfftn, lambda: _real(2, 5, 6), {}),
}


@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_decomposition_matches_eager(case, norm):
    fn, make, kwargs = CASES[case]
    x = make()
    _close(_decomposed(fn, x, norm=norm, **kwargs), fn(x, norm=norm, **kwargs))


def test_double_precision():
    x, z = torch.randn(3, 16, dtype=torch.float64), torch.randn(3, 9, dtype=torch.complex128)
    torch.testing.assert_close(_decomposed(FFT.rfft, x), FFT.rfft(x), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(_decomposed(FFT.irfft, z), FFT.irfft(z), rtol=1e-12, atol=1e-12)


def test_long_transform_stays_accurate():
    """k·n reduced mod N before the angle: no error growth with the length."""
    x = torch.randn(2, MAX_N)
    _close(_decomposed(FFT.fft, x), FFT.fft(x))


@pytest.mark.parametrize("normalization", [0, 1, 2])
def test_primitives(normalization):
    x, z = _real(2, 5, 6), _cplx(2, 5, 4)
    r2c, c2c, c2r = TABLE[aten._fft_r2c.default], TABLE[aten._fft_c2c.default], TABLE[aten._fft_c2r.default]
    _close(r2c(x, [0, 2], normalization, True), aten._fft_r2c(x, [0, 2], normalization, True))
    _close(r2c(x, [1], normalization, False), aten._fft_r2c(x, [1], normalization, False))
    _close(c2c(z, [0, 1], normalization, True), aten._fft_c2c(z, [0, 1], normalization, True))
    _close(c2c(z, [2], normalization, False), aten._fft_c2c(z, [2], normalization, False))
    _close(c2r(z, [1, 2], normalization, 6), aten._fft_c2r(z, [1, 2], normalization, 6))
    _close(c2r(z, [2], normalization, 7), aten._fft_c2r(z, [2], normalization, 7))


STFT_CASES = {
    "plain": (lambda: _real(100), {"n_fft": 10, "return_complex": True}),
    "as_real": (lambda: _real(100), {"n_fft": 10, "return_complex": False}),
    "batch_hop": (lambda: _real(3, 60), {"n_fft": 16, "hop_length": 4, "return_complex": True}),
    "window_normalized": (lambda: _real(2, 60), {"n_fft": 16, "window": torch.rand(16), "normalized": True,
                                                "return_complex": True}),
    "short_window_twosided": (lambda: _real(2, 60), {"n_fft": 16, "win_length": 9, "window": torch.rand(9),
                                                    "onesided": False, "return_complex": True}),
    "complex_signal": (lambda: _cplx(2, 50), {"n_fft": 8, "win_length": 6, "window": torch.rand(6),
                                              "return_complex": True}),
}


@pytest.mark.parametrize("case", sorted(STFT_CASES))
def test_stft_matches_eager(case):
    make, kwargs = STFT_CASES[case]
    x = make()
    _close(TABLE[aten.stft.default](x, **kwargs), aten.stft.default(x, **kwargs))


@pytest.mark.parametrize("make", [
    lambda: TABLE[aten.fft_fft.default](torch.randn(4, 8, dtype=torch.float16)),
    lambda: TABLE[aten.fft_rfft.default](torch.randn(2, MAX_N + 1)),
    lambda: TABLE[aten.fft_irfft.default](_cplx(2, 5), n=2 * MAX_N),
    lambda: TABLE[aten._fft_c2r.default](_cplx(2, 6), [1], 0, 8),  # not L//2 + 1 bins
], ids=["half", "too_long", "too_long_output", "c2r_bins"])
def test_left_to_eager(make):
    assert make() is NotImplemented


def _fft_ops(fn, *args):
    g = capture(fn, args).graph_module.graph
    return [str(n.target) for n in g.nodes if n.op == "call_function" and ("fft" in str(n.target) or "stft" in str(n.target))]


def test_capture_leaves_no_fft():
    def fn(x, z, s):
        return (FFT.rfftn(x, norm="ortho"), FFT.irfft(z, n=7), FFT.fft2(z), FFT.hfft(z), FFT.ihfft2(x),
                torch.stft(s, 8, window=torch.hann_window(8), return_complex=True))

    assert not _fft_ops(fn, _real(3, 8), _cplx(3, 5), _real(40))


COMPILED = {
    "rfft_abs": (lambda x: FFT.rfft(x).abs(), lambda: (_real(3, 12),)),
    "fft_complex": (lambda z: FFT.fft(z, norm="ortho"), lambda: (_cplx(2, 6),)),
    "irfft_odd": (lambda z: FFT.irfft(z, n=9), lambda: (_cplx(2, 5),)),
    "fft2": (lambda x: FFT.fft2(x), lambda: (_real(2, 4, 6),)),
    "stft": (lambda x: torch.stft(x, 8, hop_length=4, return_complex=True), lambda: (_real(40),)),
}


@pytest.mark.parametrize("case", sorted(COMPILED))
def test_compiled_in_interpreter(case):
    fn, make = COMPILED[case]
    args = make()
    rep = uniorch.explain(fn, *args, target="interpret")
    assert not rep.fallbacks, rep
    _close(uniorch.compile(fn, target="interpret")(*args), fn(*args))
