"""Orthogonal factorizations and symmetric eigen/singular values, unrolled at capture.

torch-mlir has no lowering for LAPACK's ops (`geqrf`, `linalg_qr`, `_linalg_svd`, `_linalg_eigh`,
...). Matrix sizes are static at capture, so each algorithm becomes a Python loop over columns
(QR) or rotation rounds (Jacobi), every step vectorized over the batch dims with slices, gathers,
reductions and elementwise ops that compile; results are built functionally (cat), never written
into views. Sizes above a limit stay eager: the op count, hence compile time, grows with them.

* QR follows LAPACK's Householder convention exactly (dgeqr2/dlarfg: beta = -sign(alpha)·norm,
  tau = (beta - alpha)/beta, v scaled so v_k = 1, tau = 0 for an already-zero column), so
  `geqrf`, `linalg_householder_product` (dorg2r), `ormqr` (dorm2r) and `linalg_qr` match eager up
  to rounding, signs included.
* Singular values come from one-sided (Hestenes) Jacobi on the columns, which keeps small
  singular values accurate (the eigenvalues of AᵀA would square the condition number); symmetric
  eigenvalues from two-sided Jacobi. Both use a parallel round-robin ordering: N/2 disjoint
  rotations per round, done with one gather of the partner columns, so the op count grows like
  sweeps × N. A fixed number of sweeps is unrolled and the result is verified at run time
  (`checks.require`): a matrix that did not converge reruns eagerly rather than answering wrong.
* Only sign-free results are produced: eigen/singular values, and pinv (V diag(σ⁺) Uᵀ does not
  depend on the vectors' signs). Eigenvectors and singular vectors themselves stay eager: their
  sign is unspecified, so there is no eager answer to match.

Non-finite inputs are sent back to eager by a run-time check as well (LAPACK's NaN/inf paths are
not reproduced), and complex, 16-bit and zero-element inputs stay eager at capture.
"""
from __future__ import annotations

import torch

from .checks import require

aten = torch.ops.aten

# Size limits: compile time grows with the unrolled op count. Measured on the interpreter: a 5x5
# QR compiles in ~3-6 s, 5x5 singular values (6 sweeps of 5 rounds, ~1200 ATen ops, ~130
# kernels) in ~20-40 s, pinv(hermitian=True) of 5x5 in ~90 s; order 8 needs ~2x the rounds.
QR_MAX = 16  # largest min(m, n) whose Householder steps are unrolled
QR_ROWS_MAX = 64  # and largest row count
JACOBI_MAX = 8  # largest matrix order (svd: min(m, n)) for Jacobi
JACOBI_ROWS_MAX = 64  # svd: largest max(m, n)


def _floats(*tensors) -> bool:
    """fp32/fp64 with elements: what these rewrites handle (LAPACK has no 16-bit kernels)."""
    return all(t.dtype in (torch.float32, torch.float64) and t.numel() > 0 for t in tensors)


def _require_finite(*tensors) -> None:
    for t in tensors:
        require(torch.isfinite(t).all(), "finite input (LAPACK's NaN/inf results are not reproduced)")


def _eps(dtype) -> float:
    return torch.finfo(dtype).eps


# --- Householder QR --------------------------------------------------------------------------------


def _scaled_norm(x, dim=-1):
    """2-norm that neither overflows nor underflows (dnrm2 scales; a plain sum of squares of fp32
    values below 1e-19 is 0 and would wrongly skip a reflection)."""
    scale = torch.amax(torch.abs(x), dim=dim)
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    return torch.sqrt(torch.sum(torch.square(x / safe.unsqueeze(dim)), dim=dim)) * scale


def _reflector(col):
    """dlarfg on a column (..., r): (beta, v below the unit head, tau). LAPACK's rule: no
    reflection (tau = 0, column unchanged) when the part below the head is exactly zero."""
    alpha, x = col[..., 0], col[..., 1:]
    if x.shape[-1] == 0:
        return alpha, x, torch.zeros_like(alpha)
    xnorm = _scaled_norm(x)
    norm = _scaled_norm(col)  # dlapy2(alpha, xnorm)
    beta = torch.where(torch.signbit(alpha), norm, -norm)  # -sign(norm, alpha)
    skip = xnorm == 0
    beta = torch.where(skip, alpha, beta)
    safe = torch.where(skip, torch.ones_like(beta), beta)
    tau = torch.where(skip, torch.zeros_like(beta), (beta - alpha) / safe)
    denom = torch.where(skip, torch.ones_like(beta), alpha - beta)
    v = torch.where(skip.unsqueeze(-1), x, x / denom.unsqueeze(-1))
    return beta, v, tau


def _unit_head(v):
    """The full Householder vector [1, v] of a stored reflector."""
    return torch.cat([v.new_ones(*v.shape[:-1], 1), v], -1)


def _reflect_left(block, v, tau):
    """H·C = C - tau·v·(vᵀC) for the rows the reflector touches (dlarf, side 'L')."""
    w = torch.sum(v.unsqueeze(-1) * block, -2, keepdim=True)
    return block - tau[..., None, None] * v.unsqueeze(-1) * w


def _reflect_right(block, v, tau):
    """C·H = C - tau·(C·v)·vᵀ for the columns the reflector touches (dlarf, side 'R')."""
    w = torch.sum(block * v.unsqueeze(-2), -1, keepdim=True)
    return block - tau[..., None, None] * w * v.unsqueeze(-2)


def _geqrf_unrolled(a):
    """dgeqr2: column k's reflector is formed from rows k: and applied to the columns right of it."""
    m, n = a.shape[-2], a.shape[-1]
    taus = []
    for k in range(min(m, n)):
        beta, v, tau = _reflector(a[..., k:, k])
        taus.append(tau)
        block = a[..., k:, k + 1:]
        if block.shape[-1] > 0:
            block = _reflect_left(block, _unit_head(v), tau)
        column = torch.cat([beta.unsqueeze(-1), v], -1).unsqueeze(-1)
        lower = torch.cat([a[..., k:, :k], column, block], -1)
        a = torch.cat([a[..., :k, :], lower], -2) if k > 0 else lower
    return a, torch.stack(taus, -1)


def _reflectors_to_q(a, tau, ncols: int):
    """dorg2r: the first `ncols` columns of H_1···H_k, applied to the identity from the last
    reflector on; step i touches only rows and columns i: (the rest is still the identity)."""
    m, k = a.shape[-2], tau.shape[-1]
    k_flat = torch.arange(m * ncols, device=a.device)  # flat, as _identity below
    eye = (torch.div(k_flat, ncols, rounding_mode="floor") == torch.remainder(k_flat, ncols)).to(a.dtype)
    q = eye.reshape(m, ncols).expand(*a.shape[:-2], m, ncols)
    for i in reversed(range(k)):
        v = _unit_head(a[..., i + 1:, i])
        block = _reflect_left(q[..., i:, i:], v, tau[..., i])
        q = torch.cat([q[..., :i, :], torch.cat([q[..., i:, :i], block], -1)], -2) if i > 0 else block
    return q


def _qr_size_ok(m: int, n: int) -> bool:
    return min(m, n) <= QR_MAX and m <= QR_ROWS_MAX and n <= QR_ROWS_MAX


def geqrf(a):
    if not _floats(a) or a.dim() < 2 or not _qr_size_ok(*a.shape[-2:]):
        return NotImplemented
    _require_finite(a)
    return _geqrf_unrolled(a)


def householder_product(a, tau):
    m, n = a.shape[-2:] if a.dim() >= 2 else (0, 0)
    if not _floats(a, tau) or a.dim() < 2 or tau.dtype != a.dtype or tau.shape[:-1] != a.shape[:-2]:
        return NotImplemented
    if not (m >= n >= tau.shape[-1]) or not _qr_size_ok(m, n):
        return NotImplemented  # eager raises on these shapes
    _require_finite(a, tau)
    return _reflectors_to_q(a, tau, n)


def ormqr(a, tau, c, left=True, transpose=False):
    """dorm2r: Q = H_1···H_k applied from the left or right, transposed or not. Qᵀ from the left
    and Q from the right apply H_1 first; the other two apply H_k first."""
    if not _floats(a, tau, c) or a.dim() < 2 or c.dim() != a.dim() or not (a.dtype == tau.dtype == c.dtype):
        return NotImplemented
    if a.shape[:-2] != c.shape[:-2] or tau.shape[:-1] != a.shape[:-2]:
        return NotImplemented
    m, n, k = c.shape[-2], c.shape[-1], tau.shape[-1]
    order = m if left else n
    if a.shape[-2] != order or k != min(order, a.shape[-1]) or not _qr_size_ok(order, max(m, n)):
        return NotImplemented  # eager's shape checks raise
    _require_finite(a, tau, c)
    steps = range(k) if left == transpose else reversed(range(k))
    for i in steps:
        v = _unit_head(a[..., i + 1:, i])
        if left:
            block = _reflect_left(c[..., i:, :], v, tau[..., i])
            c = torch.cat([c[..., :i, :], block], -2) if i > 0 else block
        else:
            block = _reflect_right(c[..., :, i:], v, tau[..., i])
            c = torch.cat([c[..., :, :i], block], -1) if i > 0 else block
    return c


def linalg_qr(a, mode="reduced"):
    """geqrf, R its upper triangle, Q from dorg2r, as ATen's CPU path; mode 'r' returns an empty
    Q as eager does."""
    if mode not in ("reduced", "complete", "r") or not _floats(a) or a.dim() < 2:
        return NotImplemented
    m, n = a.shape[-2:]
    if not _qr_size_ok(m, n):
        return NotImplemented
    _require_finite(a)
    k = min(m, n)
    factored, tau = _geqrf_unrolled(a)
    rows = m if mode == "complete" else k
    r = torch.triu(factored[..., :rows, :])
    if mode == "r":
        return a.new_empty(0), r
    return _reflectors_to_q(factored, tau, m if mode == "complete" else k), r


# --- Jacobi: rotation rounds ---------------------------------------------------------------------


# Sweeps unrolled per (even) order, (fp32, fp64): measured to reach the run-time check's
# tolerance on random, graded (condition 1e6), clustered and rank-2 matrices, plus a margin; a
# matrix needing more reruns eagerly.
_SWEEPS = {2: (2, 2), 4: (5, 5), 6: (6, 8), 8: (8, 9), 10: (9, 10), 12: (10, 11), 14: (11, 12), 16: (11, 12)}


def _sweeps(order: int, dtype) -> int:
    return _SWEEPS[order][dtype == torch.float64]


class _Round:
    """Round r of a round-robin tournament on an even number of indices: the last index meets r,
    index i meets (2r - i) mod (order - 1), so every pair meets once per sweep, order/2 pairs at a
    time. The index vectors are built from arange (a decomposition cannot hold tensor constants)
    and computed once, shared by every sweep."""

    def __init__(self, order: int, r: int, device):
        last = order - 1
        i = torch.arange(order, device=device)
        partner = torch.remainder(2 * r - i, last)
        partner = torch.where(i == r, torch.full_like(i, last), partner)
        self.partner = torch.where(i == last, torch.full_like(i, r), partner)
        self.lo = torch.minimum(i, self.partner)
        self.hi = torch.maximum(i, self.partner)
        # x·J: column lo becomes c·x_lo - s·x_hi, column hi becomes c·x_hi + s·x_lo
        self.sign = torch.where(i < self.partner, -1.0, 1.0)


def _plan(order: int, device):
    return [_Round(order, r, device) for r in range(order - 1)]


def _rotation(app, aqq, apq):
    """Rutishauser's stable Jacobi rotation (Golub & Van Loan, sym.schur2): t = tan of the smaller
    angle that zeroes apq, sign(zeta)/(|zeta| + sqrt(1 + zeta²)); no rotation when apq is already
    zero, and zeta² = inf gives t = 0 as it should. Both ends of a pair must rotate by the same
    angle: callers gather all three inputs from the pair's (lo, hi) ends. Returns (c, s).
    (Written with ones_like/zeros_like selects: the equivalent 1/(zeta ± root) form fused into a
    kernel the launch planner could not place.)"""
    nonzero = apq != 0
    zeta = (aqq - app) / (2 * torch.where(nonzero, apq, torch.ones_like(apq)))
    sign = torch.where(zeta >= 0, torch.ones_like(zeta), -torch.ones_like(zeta))
    t = sign / (torch.abs(zeta) + torch.sqrt(1 + zeta * zeta))
    t = torch.where(nonzero, t, torch.zeros_like(t))
    c = torch.rsqrt(1 + t * t)
    return c, c * t


def _rotate_columns(x, partner_cols, c, s_signed):
    """x·J for the round's rotations: column j becomes c_j·x_j ± s_j·x_partner(j)."""
    return x * c.unsqueeze(-2) + partner_cols * s_signed.unsqueeze(-2)


def _pad_even(x, rows: bool):
    """An odd order gets a zero column (and row): it never rotates (its products are exactly 0)
    and is dropped at the end."""
    n = x.shape[-1]
    if n % 2 == 0:
        return x
    x = torch.cat([x, torch.zeros_like(x[..., :1])], -1)
    if rows:
        x = torch.cat([x, torch.zeros_like(x[..., :1, :])], -2)
    return x


def _matrix_scale(a):
    """max |a_ij| per matrix (1 for a zero matrix): dividing by it keeps sums of squares finite."""
    s = torch.amax(torch.abs(a), dim=(-2, -1), keepdim=True)
    return torch.where(s == 0, torch.ones_like(s), s)


def _identity(order: int, like):
    """The identity built flat (every (order+1)-th element) then reshaped: a 2-d `eye` fused with
    a reduction over an input of the same shape into a kernel codegen rejects ("ops do not share
    one iteration domain")."""
    flat = torch.remainder(torch.arange(order * order, device=like.device), order + 1) == 0
    return flat.to(like.dtype).reshape(order, order)


def _one_sided_jacobi(g, with_v: bool):
    """Hestenes: rotate column pairs of g (..., m, n) until all are orthogonal; then g = A·V with
    column norms the singular values. Returns (g, V or None), padding dropped. V rides along as
    extra rows under g (the same column rotations), excluded from the norms and dot products."""
    m, n = g.shape[-2], g.shape[-1]
    g = _pad_even(g, rows=False)
    order = g.shape[-1]
    if with_v:
        g = torch.cat([g, _identity(order, g).expand(*g.shape[:-2], order, order)], -2)
    plan = _plan(order, g.device)
    for _ in range(_sweeps(order, g.dtype)):
        for rnd in plan:
            gp = g.index_select(-1, rnd.partner)
            top, top_p = (g[..., :m, :], gp[..., :m, :]) if with_v else (g, gp)
            norms = torch.sum(top * top, -2)
            # a pair's dot product taken at its lo end for both: a reduction may sum another
            # column in another order, and ends rotating by different angles lose orthogonality
            dots = torch.sum(top * top_p, -2).index_select(-1, rnd.lo)
            c, s = _rotation(norms.index_select(-1, rnd.lo), norms.index_select(-1, rnd.hi), dots)
            g = _rotate_columns(g, gp, c, s * rnd.sign)
    v = g[..., m:, :n][..., :n, :] if with_v else None
    g = g[..., :m, :]
    _require_orthogonal(g.mT @ g, m)
    return g[..., :n], v


def _offdiag(order: int, device):
    flat = torch.remainder(torch.arange(order * order, device=device), order + 1) != 0
    return flat.reshape(order, order)  # flat, as _identity


def _require_orthogonal(gram, rows: int):
    """Converged when every pair of columns is orthogonal to rounding level, relatively
    ((g_i·g_j)² ≤ tol²·|g_i|²·|g_j|²: column norms are then the singular values to ~n·tol) or
    absolutely (|g_i·g_j| ≤ n·eps²·max |g|², what two columns of rounding noise from a
    rank-deficient matrix can reach: their norms, ~eps·σ_max, are then right to ~n·eps·σ_max,
    LAPACK's own absolute accuracy)."""
    order, eps = gram.shape[-1], _eps(gram.dtype)
    tol = 8 * rows**0.5 * eps
    diag = torch.diagonal(gram, 0, -2, -1)
    relative = gram * gram <= (tol * tol) * diag.unsqueeze(-1) * diag.unsqueeze(-2)
    absolute = torch.abs(gram) <= (order * eps * eps) * torch.amax(diag, -1, keepdim=True).unsqueeze(-1)
    ok = relative | absolute | ~_offdiag(order, gram.device)
    require(ok, "one-sided Jacobi converged within its unrolled sweeps")


# Two-sided Jacobi's stopping point: ||off-diagonal||_F ≤ tol·n·||A||_F bounds every eigenvalue's
# absolute error by that (Weyl); fp32 stops at rounding level (~8 eps), fp64 at 1e-12 relative,
# far below any comparison with eager, which a rank-deficient fp64 matrix (slow, linear
# convergence within its zero cluster) reaches in the unrolled sweeps.
_OFF_TOL = {torch.float32: 8 * torch.finfo(torch.float32).eps, torch.float64: 1e-12}


def _two_sided_jacobi(a, with_v: bool):
    """Cyclic Jacobi on a symmetric (..., n, n): Jᵀ·A·J per round until diagonal. Returns the
    diagonal (eigenvalues, unsorted) and the accumulated rotations (eigenvectors) if asked."""
    n = a.shape[-1]
    a = _pad_even(a, rows=True)
    order = a.shape[-1]
    v = None
    if with_v:
        v = _identity(order, a).expand(*a.shape[:-2], order, order)
    plan = _plan(order, a.device)
    for _ in range(_sweeps(order, a.dtype)):
        for rnd in plan:
            ap = a.index_select(-1, rnd.partner)
            diag = torch.diagonal(a, 0, -2, -1)
            apq = torch.diagonal(ap, 0, -2, -1).index_select(-1, rnd.lo)  # a[lo, hi], one side only
            c, s = _rotation(diag.index_select(-1, rnd.lo), diag.index_select(-1, rnd.hi), apq)
            s = s * rnd.sign
            b = _rotate_columns(a, ap, c, s)
            a = b * c.unsqueeze(-1) + b.index_select(-2, rnd.partner) * s.unsqueeze(-1)
            if with_v:
                v = _rotate_columns(v, v.index_select(-1, rnd.partner), c, s)
    off = torch.where(_offdiag(order, a.device), a, 0.0)
    tol = _OFF_TOL[a.dtype] * order
    ok = torch.sum(off * off, (-2, -1)) <= (tol * tol) * torch.sum(a * a, (-2, -1))
    require(ok, "two-sided Jacobi converged within its unrolled sweeps")
    eig = torch.diagonal(a, 0, -2, -1)[..., :n]
    return eig, (v[..., :n, :n] if with_v else None)


def _symmetric(a, uplo: str):
    """The symmetric matrix LAPACK sees: one triangle mirrored (the other is never read)."""
    n = a.shape[-1]
    i = torch.arange(n, device=a.device)
    keep = (i[:, None] >= i[None, :]) if uplo.upper() == "L" else (i[:, None] <= i[None, :])
    return torch.where(keep, a, a.mT)


def _square_ok(a) -> bool:
    return _floats(a) and a.dim() >= 2 and a.shape[-1] == a.shape[-2] and a.shape[-1] <= JACOBI_MAX


def _eigh_values(a, uplo: str, with_v: bool):
    _require_finite(a)
    sym = _symmetric(a, uplo)
    scale = _matrix_scale(sym)
    eig, v = _two_sided_jacobi(sym / scale, with_v)
    return eig * scale.squeeze(-1), v


def linalg_eigh(a, uplo="L", compute_v=True):
    """Eigenvalues only (compute_v=False: eigvalsh, matrix_rank(hermitian=True)), ascending as
    LAPACK returns them, with eager's empty eigenvector tensor."""
    if compute_v or not _square_ok(a):
        return NotImplemented
    eig, _ = _eigh_values(a, uplo, False)
    return torch.sort(eig, -1).values, a.new_empty(0)


def _svd_ok(a) -> bool:
    return (_floats(a) and a.dim() >= 2 and min(a.shape[-2:]) <= JACOBI_MAX
            and max(a.shape[-2:]) <= JACOBI_ROWS_MAX)


def _svd_columns(a, with_v: bool):
    """One-sided Jacobi on the wider side's columns (A or Aᵀ, same singular values), scaled to
    max |a_ij| = 1. Returns (g, V, scale, transposed) with A_scaled·V = g (Aᵀ if transposed)."""
    _require_finite(a)
    transposed = a.shape[-2] < a.shape[-1]
    g = a.mT if transposed else a
    scale = _matrix_scale(g)
    g, v = _one_sided_jacobi(g / scale, with_v)
    return g, v, scale, transposed


def linalg_svd(a, full_matrices=False, compute_uv=True, driver=None):
    """Singular values only (compute_uv=False: svdvals, matrix_rank, cond, nuclear norm),
    descending as LAPACK returns them, with eager's empty U and Vh."""
    if compute_uv or not _svd_ok(a):
        return NotImplemented
    g, _, scale, _ = _svd_columns(a, False)
    sigma = torch.sqrt(torch.sum(g * g, -2)) * scale.squeeze(-1)
    return a.new_empty(0), torch.sort(sigma, -1, descending=True).values, a.new_empty(0)


# --- pinv ----------------------------------------------------------------------------------------


def _atol_rtol(a, atol, rtol):
    """ATen's get_atol_rtol: float64 tolerances; atol defaults to 0, rtol to eps·max(m, n), or 0
    where an atol > 0 was given."""
    f64 = dict(dtype=torch.float64, device=a.device)
    atol_t = atol if atol is not None else torch.zeros((), **f64)
    if rtol is not None:
        return atol_t, rtol
    default = torch.full((), _eps(a.dtype) * max(a.shape[-2], a.shape[-1]), **f64)
    if atol is None:
        return atol_t, default
    return atol_t, torch.where(atol > 0, torch.zeros((), **f64), default)


def _kept_inverse(values, magnitude, atol, rtol):
    """ATen's cutoff: values whose magnitude is at most max(atol, rtol·max magnitude) count as
    zero; the others are inverted."""
    max_val = torch.amax(magnitude, -1, keepdim=True)
    tol = torch.maximum(atol.unsqueeze(-1), rtol.unsqueeze(-1) * max_val)
    return torch.where(magnitude > tol, torch.reciprocal(values), torch.zeros_like(values)).to(values.dtype)


def _pinv_svd(a, atol, rtol):
    """V·diag(σ⁺)·Uᵀ; with g = A_scaled·V = U·diag(σ_scaled), Uᵀ = diag(1/σ_scaled)·gᵀ."""
    g, v, scale, transposed = _svd_columns(a, True)
    sigma_scaled = torch.sqrt(torch.sum(g * g, -2))
    inv = _kept_inverse(sigma_scaled * scale.squeeze(-1), sigma_scaled * scale.squeeze(-1), atol, rtol)
    safe = torch.where(sigma_scaled > 0, sigma_scaled, torch.ones_like(sigma_scaled))
    pinv = (v * (inv / safe).unsqueeze(-2)) @ g.mT
    return pinv.mT if transposed else pinv


def _pinv_eigh(a, atol, rtol):
    """ATen's hermitian path: eigh of the lower triangle, U·diag(λ⁺)·Uᵀ with the cutoff on |λ|."""
    eig, u = _eigh_values(a, "L", True)
    inv = _kept_inverse(eig, torch.abs(eig), atol, rtol)
    return (u * inv.unsqueeze(-2)) @ u.mT


def linalg_pinv(a, atol=None, rtol=None, hermitian=False):
    if not (_square_ok(a) if hermitian else _svd_ok(a)):
        return NotImplemented
    for t in (atol, rtol):
        if t is not None and (t.is_complex() or t.dim() > a.dim() - 2):
            return NotImplemented
    atol, rtol = _atol_rtol(a, atol, rtol)
    return _pinv_eigh(a, atol, rtol) if hermitian else _pinv_svd(a, atol, rtol)


def _as_tensor(x, a):
    return None if x is None else torch.full((), float(x), dtype=torch.float64, device=a.device)


def linalg_pinv_float(a, atol=None, rtol=None, hermitian=False):
    return linalg_pinv(a, _as_tensor(atol, a), _as_tensor(rtol, a), hermitian)


def linalg_pinv_rcond(a, rcond, hermitian=False):
    """The old `rcond` form: rtol = rcond, no atol."""
    rcond = rcond if isinstance(rcond, torch.Tensor) else _as_tensor(rcond, a)
    return linalg_pinv(a, None, rcond, hermitian)


TABLE = {
    aten.geqrf.default: geqrf,
    aten.linalg_householder_product.default: householder_product,
    aten.ormqr.default: ormqr,
    aten.linalg_qr.default: linalg_qr,
    aten._linalg_eigh.default: linalg_eigh,
    aten._linalg_svd.default: linalg_svd,
    aten.linalg_pinv.atol_rtol_tensor: linalg_pinv,
    aten.linalg_pinv.atol_rtol_float: linalg_pinv_float,
    aten.linalg_pinv.default: linalg_pinv_rcond,
    aten.linalg_pinv.rcond_tensor: linalg_pinv_rcond,
}


def linalg_eigvalsh(a, uplo="L"):
    """Caught before ATen's own composite, which asks `_linalg_eigh` for eigenvectors whenever
    the input is a tensor subclass (the fake tensors of capture): with compute_v=True that op must
    stay eager (vector signs), so eigenvalue-only callers are rewritten here."""
    return linalg_eigh(a, uplo, False)[0] if _square_ok(a) else NotImplemented


def linalg_svdvals(a, driver=None):
    """As linalg_eigvalsh: ATen's composite would request U and V under capture."""
    return linalg_svd(a, False, False)[1] if _svd_ok(a) else NotImplemented


TABLE[aten.linalg_eigvalsh.default] = linalg_eigvalsh
TABLE[aten.linalg_svdvals.default] = linalg_svdvals
