"""FFTs as dense DFT contractions (torch-mlir has no lowering for any `fft` op).

Every transformed dim becomes one matrix product with a DFT matrix built in the graph from
`arange`: k·n is reduced mod N in int64 first, so the angle 2π·r/N (r folded into [-N/2, N/2])
is small and exact to an ulp of the compute dtype, and cos/sin of it are as accurate as the
FFT's own twiddles. An O(N²) contraction per dim is what uniorch compiles well; it is only worth
it for short transforms, so each dim is limited to MAX_N points (longer ones stay eager).

Complex tensors are touched only at the edges: read through `view_as_real`, built with
`torch.complex`, so that a capture pass representing complex numbers as real pairs (a trailing
dim of 2) sees nothing else. In between, a complex tensor is its "pair": the real view, trailing
dim 2, and a complex contraction is one real matmul of the pair (dim and re/im flattened
together, 2N) with a [2N, 2K] block matrix [[cos, s·sin], [-s·sin, cos]].

Semantics follow ATen (aten/src/ATen/native/SpectralOps.cpp): `_fft_r2c` transforms the last
dim first (onesided: N//2 + 1 bins), then the others; `_fft_c2r` runs the inverse complex
transform over all dims but the last, then the Hermitian one over the last, which reads bins
0..L//2 only and ignores the imaginary parts of the DC and (even L) Nyquist bins, as pocketfft
and MKL do. `normalization` is ATen's int: 0 none, 1 1/sqrt(n), 2 1/n, n the signal's size.
The `fft_*` functions (CompositeImplicit, but kept whole by export) are rewritten here too, with
torch/_refs/fft.py's argument handling: `n`/`s` pad with zeros or trim, `norm` picks the scale.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

aten = torch.ops.aten

MAX_N = 1024  # longest transformed dim (and Hermitian output) rewritten as a contraction
REAL = (torch.float32, torch.float64)
COMPLEX = (torch.complex64, torch.complex128)


# --- DFT matrices -------------------------------------------------------------------------------

def _angles(n_in: int, n_out: int, n: int, dtype, device):
    """[n_in, n_out] angles 2π·(j·k mod n)/n, folded into [-π, π] so they stay small."""
    j = torch.arange(n_in, dtype=torch.int64, device=device)[:, None]
    k = torch.arange(n_out, dtype=torch.int64, device=device)[None, :]
    r = torch.remainder(j * k, n)
    r = torch.where(2 * r > n, r - n, r)  # same cos/sin, half the angle's magnitude
    return r.to(dtype) * (2.0 * math.pi / n)


def _complex_matrix(n_in: int, n_out: int, n: int, sign: int, scale: float, dtype, device):
    """[2·n_in, 2·n_out]: pair (re, im) of input point j to pair of output bin k, times
    exp(sign·i·θ): re' = re·cos - sign·im·sin, im' = sign·re·sin + im·cos."""
    theta = _angles(n_in, n_out, n, dtype, device)
    c, s = torch.cos(theta) * scale, torch.sin(theta) * (sign * scale)
    from_re = torch.stack([c, s], -1)  # [n_in, n_out, 2]
    from_im = torch.stack([-s, c], -1)
    return torch.stack([from_re, from_im], 1).reshape(2 * n_in, 2 * n_out)


def _real_matrix(n_in: int, n_out: int, sign: int, scale: float, dtype, device):
    """[n_in, 2·n_out]: real point j to pair of bin k, times exp(sign·i·θ)."""
    theta = _angles(n_in, n_out, n_in, dtype, device)
    return torch.stack([torch.cos(theta) * scale, torch.sin(theta) * (sign * scale)], -1).reshape(n_in, 2 * n_out)


def _hermitian_matrix(length: int, sign: int, scale: float, dtype, device):
    """[2·(L//2 + 1), L]: the pairs of bins 0..L//2 to L real points of the Hermitian signal
    they stand for, exp(sign·i·θ): bins 1..(L-1)//2 count twice (their mirror images), the DC and
    Nyquist bins once and by their real parts only."""
    bins = length // 2 + 1
    theta = _angles(bins, length, length, dtype, device)
    k = torch.arange(bins, dtype=torch.int64, device=device)[:, None]
    mirrored = ((k > 0) & (2 * k != length)).to(dtype)  # weights in the dtype: fp64 stays exact
    w_re = (mirrored + 1.0) * scale
    w_im = mirrored * (-2.0 * sign * scale)
    return torch.stack([torch.cos(theta) * w_re, torch.sin(theta) * w_im], 1).reshape(2 * bins, length)


# --- contractions over one dim ------------------------------------------------------------------

def _pair_matmul(pair, d: int, mat, n_out: int):
    """Contracts pair dim `d` (with re/im) against `mat` [2N, 2·n_out]; returns a pair."""
    x = torch.movedim(pair, d, -2)
    x = x.reshape(*x.shape[:-2], x.shape[-2] * 2) @ mat
    return torch.movedim(x.reshape(*x.shape[:-1], n_out, 2), -2, d)


def _c2c(pair, dims: Sequence[int], sign: int, scale: float = 1.0):
    for i, d in enumerate(dims):
        n = pair.shape[d]
        mat = _complex_matrix(n, n, n, sign, scale if i == 0 else 1.0, pair.dtype, pair.device)
        pair = _pair_matmul(pair, d, mat, n)
    return pair


def _r2c(x, dims: Sequence[int], onesided: bool, scale: float = 1.0):
    """Forward transform of a real tensor: the last dim real-to-pair, then the others."""
    d = dims[-1]
    n = x.shape[d]
    bins = n // 2 + 1 if onesided else n
    mat = _real_matrix(n, bins, -1, scale, x.dtype, x.device)
    y = torch.movedim(x, d, -1) @ mat
    pair = torch.movedim(y.reshape(*y.shape[:-1], bins, 2), -2, d)
    return _c2c(pair, dims[:-1], -1)


def _c2r(pair, dims: Sequence[int], length: int, scale: float = 1.0, sign: int = 1):
    """Inverse transform to a real tensor: the other dims complex, then the last Hermitian."""
    pair = _c2c(pair, dims[:-1], 1)
    d = dims[-1]
    mat = _hermitian_matrix(length, sign, scale, pair.dtype, pair.device)
    x = torch.movedim(pair, d, -2)
    x = x.reshape(*x.shape[:-2], x.shape[-2] * 2) @ mat
    return torch.movedim(x, -1, d)


# --- edges: complex in, complex out -------------------------------------------------------------

def _pair(z):
    return torch.view_as_real(z)


def _complex(pair):
    return torch.complex(pair[..., 0], pair[..., 1])


def _conj(pair):
    return torch.stack([pair[..., 0], -pair[..., 1]], -1)


# --- the primitives -----------------------------------------------------------------------------

def _dims(x, dim) -> list[int] | None:
    if isinstance(dim, int):
        dim = [dim]
    dims = [d % x.dim() for d in dim] if x.dim() else []
    return dims if dims and len(set(dims)) == len(dims) else None


def _fits(sizes) -> bool:
    return all(1 <= n <= MAX_N for n in sizes)


def _scale(normalization: int, n: int) -> float:
    return (1.0, 1.0 / math.sqrt(n), 1.0 / n)[normalization]


def _doable(x, dtypes, dims) -> bool:
    return x.dtype in dtypes and dims is not None and x.numel() > 0 and _fits(x.shape[d] for d in dims)


def fft_r2c(x, dim, normalization: int, onesided: bool):
    dims = _dims(x, dim)
    if not _doable(x, REAL, dims) or normalization not in (0, 1, 2):
        return NotImplemented
    scale = _scale(normalization, math.prod(x.shape[d] for d in dims))
    return _complex(_r2c(x, dims, onesided, scale))


def fft_c2c(z, dim, normalization: int, forward: bool):
    dims = _dims(z, dim)
    if not _doable(z, COMPLEX, dims) or normalization not in (0, 1, 2):
        return NotImplemented
    scale = _scale(normalization, math.prod(z.shape[d] for d in dims))
    return _complex(_c2c(_pair(z), dims, -1 if forward else 1, scale))


def fft_c2r(z, dim, normalization: int, last_dim_size: int):
    dims = _dims(z, dim)
    if not _doable(z, COMPLEX, dims) or normalization not in (0, 1, 2) or not _fits([last_dim_size]):
        return NotImplemented
    if z.shape[dims[-1]] != last_dim_size // 2 + 1:  # other bin counts: ATen asserts or reads a prefix
        return NotImplemented
    n = math.prod(z.shape[d] for d in dims[:-1]) * last_dim_size
    return _c2r(_pair(z), dims, last_dim_size, _scale(normalization, n))


# --- torch.fft.* --------------------------------------------------------------------------------

def _norm_scale(norm, n: int, forward: bool) -> float | None:
    """torch.fft's `norm` for a transform of n points; None for a mode it does not know."""
    if norm == "ortho":
        return 1.0 / math.sqrt(n)
    if norm in (None, "backward"):
        return 1.0 if forward else 1.0 / n
    if norm == "forward":
        return 1.0 / n if forward else 1.0
    return None


def _resize(x, dims: Sequence[int], sizes: Sequence[int]):
    """Zero-pads or trims each dim of a real tensor (or a pair) to its size, from the start."""
    for d, n in zip(dims, sizes):
        have = x.shape[d]
        if have > n:
            x = x.narrow(d, 0, n)
        elif have < n:
            pad = [0, 0] * (x.dim() - d - 1) + [0, n - have]
            x = torch.constant_pad_nd(x, pad, 0.0)
    return x


def _canonical(x, s, dim):
    """torch.fft's (s, dim) rules: dims default to the last len(s) (or all), s's -1 to the size.
    None when the arguments are invalid (eager raises)."""
    if dim is not None:
        dims = _dims(x, dim)
        if dims is None:
            return None
    if s is not None:
        s = [s] if isinstance(s, int) else list(s)
        if (dim is not None and len(dims) != len(s)) or len(s) > x.dim() or not s:
            return None
        if dim is None:
            dims = list(range(x.dim() - len(s), x.dim()))
        shape = [n if n != -1 else x.shape[d] for n, d in zip(s, dims)]
    elif dim is None:
        dims, shape = list(range(x.dim())), list(x.shape)
    else:
        shape = [x.shape[d] for d in dims]
    if not dims or not _fits(shape) or x.numel() == 0 or not _fits(x.shape[d] for d in dims):
        return None
    return shape, dims


def _forward_nd(x, s, dim, norm, forward: bool, onesided: bool, complex_only: bool = False):
    """fftn/ifftn/rfftn and the 1-D forms: complex inputs by c2c, real ones by r2c (onesided
    for rfft), the inverse of a real signal as the conjugate of its forward transform."""
    plan = _canonical(x, s, dim)
    if plan is None:
        return NotImplemented
    shape, dims = plan
    scale = _norm_scale(norm, math.prod(shape), forward)
    if scale is None:
        return NotImplemented
    if x.dtype in COMPLEX:
        if onesided:
            return NotImplemented  # rfft of a complex tensor: eager raises
        return _complex(_c2c(_resize(_pair(x), dims, shape), dims, -1 if forward else 1, scale))
    if x.dtype not in REAL or complex_only:
        return NotImplemented
    out = _r2c(_resize(x, dims, shape), dims, onesided, scale)
    return _complex(out if forward else _conj(out))


def _hermitian_nd(z, s, dim, norm, forward: bool):
    """irfftn/hfftn and the 1-D forms. The last dim's length L is s[-1], else 2·(bins - 1); its
    input is resized to L//2 + 1 bins. hfft is the conjugate input's inverse transform, scaled
    as a forward one."""
    if z.dtype not in COMPLEX + REAL:
        return NotImplemented
    plan = _canonical(z, s, dim)
    if plan is None:
        return NotImplemented
    shape, dims = plan
    explicit = s is not None and (isinstance(s, int) or s[-1] != -1)
    length = shape[-1] if explicit else 2 * (z.shape[dims[-1]] - 1)
    if not _fits([length]):
        return NotImplemented
    scale = _norm_scale(norm, math.prod(shape[:-1]) * length, forward)
    if scale is None:
        return NotImplemented
    pair = _pair(z) if z.dtype in COMPLEX else torch.stack([z, torch.zeros_like(z)], -1)  # eager promotes
    pair = _resize(pair, dims, shape[:-1] + [length // 2 + 1])
    if forward:  # hfftn: conj, then c2r's inverse transform over every dim
        pair = _conj(pair)
    return _c2r(pair, dims, length, scale)


def _one_d(n, dim):
    return (None if n is None else [n]), [dim]


def _fft(x, n=None, dim=-1, norm=None):
    return _forward_nd(x, *_one_d(n, dim), norm, True, False)


def _ifft(x, n=None, dim=-1, norm=None):
    return _forward_nd(x, *_one_d(n, dim), norm, False, False)


def _rfft(x, n=None, dim=-1, norm=None):
    return _forward_nd(x, *_one_d(n, dim), norm, True, True)


def _ihfft(x, n=None, dim=-1, norm=None):
    return _forward_nd(x, *_one_d(n, dim), norm, False, True)


def _irfft(z, n=None, dim=-1, norm=None):
    return _hermitian_nd(z, *_one_d(n, dim), norm, False)


def _hfft(z, n=None, dim=-1, norm=None):
    return _hermitian_nd(z, *_one_d(n, dim), norm, True)


def _nd(forward: bool, onesided: bool, default_dim):
    def decomposed(x, s=None, dim=default_dim, norm=None):
        return _forward_nd(x, s, dim, norm, forward, onesided)

    return decomposed


def _hermitian(forward: bool, default_dim):
    def decomposed(z, s=None, dim=default_dim, norm=None):
        return _hermitian_nd(z, s, dim, norm, forward)

    return decomposed


def _stft_window(window, n_fft: int, win: int, dtype, device):
    """ATen's window: the given one (or ones, when win_length < n_fft) centred in n_fft points."""
    if window is None:
        if win == n_fft:
            return None
        window = torch.ones(win, dtype=dtype, device=device)
    left = (n_fft - win) // 2
    return torch.constant_pad_nd(window, [left, n_fft - win - left], 0.0)


def _stft(x, n_fft, hop_length=None, win_length=None, window=None, normalized=False, onesided=None,
          return_complex=None):
    """`stft` (after torch.stft's own centre padding) as ATen computes it: frames every hop_length
    points (a gather), times the window, a one-dim DFT each (onesided for real signals), bins
    before frames; `return_complex=False` is the pair itself, which is what view_as_real gives."""
    hop = hop_length if hop_length is not None else n_fft // 4
    win = win_length if win_length is not None else n_fft
    if return_complex is None or x.dim() not in (1, 2) or x.dtype not in REAL + COMPLEX:
        return NotImplemented
    if not (1 <= n_fft <= MAX_N and hop > 0 and 0 < win <= n_fft and n_fft <= x.shape[-1]):
        return NotImplemented
    if window is not None and (window.dtype != x.dtype.to_real() or window.shape != (win,)):
        return NotImplemented  # complex or mismatched windows: eager
    real = x.dtype in REAL
    if onesided is None:
        onesided = real
    if onesided and not real:
        return NotImplemented
    frames = 1 + (x.shape[-1] - n_fft) // hop
    start = torch.arange(frames, dtype=torch.int64, device=x.device)[:, None] * hop
    index = (start + torch.arange(n_fft, dtype=torch.int64, device=x.device)[None, :]).reshape(-1)
    window = _stft_window(window, n_fft, win, x.dtype.to_real(), x.device)
    scale = 1.0 / math.sqrt(n_fft) if normalized else 1.0
    if real:
        signal = x.index_select(-1, index).reshape(*x.shape[:-1], frames, n_fft)
        if window is not None:
            signal = signal * window
        out = _r2c(signal, [signal.dim() - 1], onesided, scale)
    else:
        pair = _pair(x)
        signal = pair.index_select(-2, index).reshape(*x.shape[:-1], frames, n_fft, 2)
        if window is not None:
            signal = signal * window[:, None]
        out = _c2c(signal, [signal.dim() - 2], -1, scale)
    out = out.transpose(-3, -2)  # [..., bins, frames, 2]
    return _complex(out) if return_complex else out


_PLANE = (-2, -1)

TABLE = {
    aten._fft_r2c.default: fft_r2c,
    aten._fft_c2c.default: fft_c2c,
    aten._fft_c2r.default: fft_c2r,
    aten.fft_fft.default: _fft,
    aten.fft_ifft.default: _ifft,
    aten.fft_rfft.default: _rfft,
    aten.fft_ihfft.default: _ihfft,
    aten.fft_irfft.default: _irfft,
    aten.fft_hfft.default: _hfft,
    aten.fft_fft2.default: _nd(True, False, _PLANE),
    aten.fft_ifft2.default: _nd(False, False, _PLANE),
    aten.fft_rfft2.default: _nd(True, True, _PLANE),
    aten.fft_ihfft2.default: _nd(False, True, _PLANE),
    aten.fft_irfft2.default: _hermitian(False, _PLANE),
    aten.fft_hfft2.default: _hermitian(True, _PLANE),
    aten.fft_fftn.default: _nd(True, False, None),
    aten.fft_ifftn.default: _nd(False, False, None),
    aten.fft_rfftn.default: _nd(True, True, None),
    aten.fft_ihfftn.default: _nd(False, True, None),
    aten.fft_irfftn.default: _hermitian(False, None),
    aten.fft_hfftn.default: _hermitian(True, None),
    aten.stft.default: _stft,
}
