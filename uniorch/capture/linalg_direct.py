"""Dense direct linear algebra (LAPACK-backed in ATen) as loops unrolled at capture.

torch-mlir has no lowering for ATen's LAPACK ops (getrf, potrf, trtrs, ...). Matrix sizes are
static at capture, so each factorization becomes a Python loop over the matrix dimension whose
steps are vectorized over batch dims and the trailing rows and columns: slices, argmax, gathers,
outer products and selects, all of which compile. Results follow LAPACK's conventions so they
equal eager up to rounding:

* LU with partial pivoting (getrf): the pivot is the first row of largest |value| in the column
  (idamax); pivots are 1-based int32; L is unit lower and U upper, packed in one matrix; `info`
  is the first i (1-based) with U[i, i] == 0. A zero pivot leaves its column unscaled, as getrf
  does, so a singular matrix gives finite factors and det 0, not NaN.
* Cholesky (potrf): `info` is the order of the first leading minor that is not positive
  definite. Past it LAPACK stops; here the factor goes on (NaN), which eager leaves unspecified.
* Triangular solves (trsm): substitution over rows, reading only the named triangle.

Each loop step costs a handful of kernels, so only matrices up to MAX_N are unrolled; larger
ones, empty ones and non-float dtypes stay eager (NotImplemented).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

MAX_N = 16  # largest dimension unrolled: LU took ~25 s to compile at 16, ~4 min at 32 (interpreter)


def _supported(*tensors) -> bool:
    """fp32/fp64, non-empty, dims up to MAX_N (complex, fp16/bf16 have no LAPACK path in ATen)."""
    for t in tensors:
        if t.dtype not in (torch.float32, torch.float64) or t.numel() == 0 or t.dim() < 2:
            return False
        if max(t.shape[-2:]) > MAX_N:
            return False
    return True


def _rows(m: int, device):
    return torch.arange(m, device=device)[:, None]


def _cols(n: int, device):
    return torch.arange(n, device=device)[None, :]


# ---------------------------------------------------------------------------------------------
# LU


def _lu_core(a, transposed: bool = False):
    """getrf on a (..., m, n): (LU, pivots as 0-based int64 (..., k), info int32 (...)).

    transposed=True factors Aᵀ where A lies: rows of Aᵀ are the columns of `a`, and the result
    is LUᵀ. Reading in place (no transposed view) keeps the fusion pass away from views of the
    input read two ways, which it does not always handle."""
    r, c = (-1, -2) if transposed else (-2, -1)
    m, n = a.shape[r], a.shape[c]
    k = min(m, n)
    along, across = _index_along(a, r), _index_along(a, c)
    pivots = []
    w = a
    for j in range(k):
        # idamax: argmax returns the first of equal maxima, as LAPACK does
        column = w.narrow(c, j, 1).narrow(r, j, m - j)
        p = torch.argmax(torch.abs(column), r, keepdim=True) + j  # (..., 1, 1)
        pivots.append(p.reshape(*a.shape[:-2], 1))
        w = _lu_step(w, p, j, r, along, across)
    diag = torch.diagonal(w.narrow(-2, 0, k).narrow(-1, 0, k), 0, -2, -1)
    return w, torch.cat(pivots, -1), _first_zero(diag)


def _index_along(a, d: int):
    """Row (d = -2) or column (d = -1) indices of a's matrices, broadcastable against them."""
    idx = torch.arange(a.shape[d], device=a.device)
    return idx[:, None] if d == -2 else idx[None, :]


def _lu_step(w, p, j: int, r: int, along, across):
    """Step j of getf2 with pivot row p (..., 1, 1) (rows along dim r): swap rows j and p (whole
    rows: LAPACK also swaps the finished part of L), scale the column below the pivot, update
    the trailing block.

    Written in terms of the step's input alone (the swapped rows gathered, never the swapped
    matrix sliced again), so it fuses into one elementwise kernel."""
    c = -1 if r == -2 else -2
    shape = list(w.shape)
    shape[r] = 1
    row_p = torch.gather(w, r, p.expand(shape))  # the new row j
    row_j = w.narrow(r, j, 1)  # the new row p
    swapped = torch.where(along == j, row_p, torch.where(along == p, row_j, w))
    if j == w.shape[r] - 1:
        return swapped
    d = row_p.narrow(c, j, 1)  # the pivot (..., 1, 1)
    col = torch.where(along == p, row_j.narrow(c, j, 1), w.narrow(c, j, 1))  # column j below row j
    # getf2 scales by the reciprocal; a zero pivot leaves the column as it is (all zeros)
    zero = d == 0
    l = torch.where(zero, col, col * (1.0 / torch.where(zero, torch.ones_like(d), d)))
    updated = torch.where(across > j, swapped - l * row_p, l)
    return torch.where((along > j) & (across >= j), updated, swapped)


def _first_zero(diag):
    """LAPACK's info: the first i (1-based) with diag[i] == 0, else 0 (int32)."""
    zero = diag == 0
    first = torch.argmax(zero.to(torch.int32), -1) + 1
    return torch.where(torch.any(zero, -1), first, 0).to(torch.int32)


def _lu_factor_ex(a, *, pivot=True, check_errors=False):
    if not pivot or check_errors or not _supported(a):
        return NotImplemented  # ATen's CPU LU always pivots (pivot=False raises there)
    lu, piv, info = _lu_core(a)
    return lu, (piv + 1).to(torch.int32), info


def _perm_from_pivots(piv0, m: int):
    """The row order getrf's interchanges produce: A[perm] = L U (piv0 0-based, (..., k))."""
    batch = piv0.shape[:-1]
    perm = torch.arange(m, device=piv0.device).expand(*batch, m)
    idx = torch.arange(m, device=piv0.device)
    for j in range(piv0.shape[-1]):
        p = piv0[..., j : j + 1]  # (..., 1)
        at_p = torch.gather(perm, -1, p)
        at_j = perm[..., j : j + 1]
        perm = torch.where(idx == j, at_p, torch.where(idx == p, at_j, perm))
    return perm


def _perm_matrix(perm, dtype):
    """P with A = P L U: P[perm[c], c] = 1."""
    m = perm.shape[-1]
    return (_rows(m, perm.device) == perm[..., None, :]).to(dtype)


def _unpack_lu(lu):
    m, n = lu.shape[-2:]
    k = min(m, n)
    eye = torch.eye(m, k, dtype=lu.dtype, device=lu.device)
    L = torch.tril(lu[..., :, :k], -1) + eye
    U = torch.triu(lu[..., :k, :])
    return L, U


def _linalg_lu(a, *, pivot=True):
    if not pivot or not _supported(a):
        return NotImplemented
    lu, piv, _ = _lu_core(a)
    L, U = _unpack_lu(lu)
    return _perm_matrix(_perm_from_pivots(piv, a.shape[-2]), a.dtype), L, U


def _valid_pivots(pivots, m: int):
    """0-based pivots clamped into range so a bad input cannot index out of bounds."""
    return torch.clamp(pivots.to(torch.int64) - 1, 0, m - 1)


def _lu_unpack(lu, pivots, unpack_data=True, unpack_pivots=True):
    if not _supported(lu) or pivots.dim() != lu.dim() - 1:
        return NotImplemented
    m = lu.shape[-2]
    empty = lu.new_empty(0)
    L, U = _unpack_lu(lu) if unpack_data else (empty, empty)
    if not unpack_pivots:
        return empty, L, U
    perm = _perm_from_pivots(_valid_pivots(pivots, m), m)
    return _perm_matrix(perm, lu.dtype), L, U



# ---------------------------------------------------------------------------------------------
# Triangular solves


def _tri_solve(a, b, upper: bool, unit: bool, trans: bool = False):
    """X with op(A) X = B, op(A) = Aᵀ if trans else A, reading only A's upper (lower) triangle,
    as trtrs/trsm do; A (..., n, n), B (..., n, k), batch dims broadcast. Substitution over
    rows: each row of X from the rows already known (unknown rows are still 0). A row of Aᵀ is
    read as a column of A, so no transposed view is made."""
    n, k = a.shape[-1], b.shape[-1]
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a, b = a.expand(*batch, n, n), b.expand(*batch, n, k)
    strict = torch.triu(a, 1) if upper else torch.tril(a, -1)  # the other triangle never read
    rows = _rows(n, a.device)
    x = torch.zeros_like(b)
    for i in reversed(range(n)) if upper != trans else range(n):
        if trans:
            dot = torch.sum(strict[..., :, i : i + 1] * x, -2, keepdim=True)
        else:
            dot = torch.matmul(strict[..., i : i + 1, :], x)
        r = b[..., i : i + 1, :] - dot
        if not unit:
            r = r / a[..., i : i + 1, i : i + 1]
        x = torch.where(rows == i, r, x)
    return x


def _triangular_solve(b, a, upper=True, transpose=False, unitriangular=False):
    """`triangular_solve` (deprecated): op(A) X = B, and A broadcast to the batch, cloned."""
    if not _supported(a, b) or a.shape[-1] != a.shape[-2]:
        return NotImplemented
    x = _tri_solve(a, b, upper, unitriangular, transpose)
    n = a.shape[-1]
    return x, a.expand(*x.shape[:-2], n, n).clone()


def _solve_triangular(a, b, *, upper, left=True, unitriangular=False):
    """`linalg.solve_triangular`: A X = B, or X A = B for left=False (as Aᵀ Xᵀ = Bᵀ)."""
    if not _supported(a, b) or a.shape[-1] != a.shape[-2]:
        return NotImplemented
    if left:
        return _tri_solve(a, b, upper, unitriangular)
    return _tri_solve(a, b.mT, upper, unitriangular, trans=True).mT


# ---------------------------------------------------------------------------------------------
# Solves, inverse and determinants from the LU factors


def _inverse_perm(perm):
    """invperm[perm[c]] = c, as an exact integer one-hot sum."""
    m = perm.shape[-1]
    onehot = _rows(m, perm.device) == perm[..., None, :]  # [r, c]: perm[c] == r
    return torch.sum(onehot * torch.arange(m, device=perm.device), -1)


def _permute_rows(x, perm):
    """x[..., perm, :] for a batched perm (..., m)."""
    index = perm[..., :, None].expand(*x.shape[:-2], perm.shape[-1], x.shape[-1])
    return torch.gather(x, -2, index)


def _lu_solve_core(f, piv0, b, adjoint: bool, f_is_lu_t: bool = False):
    """getrs: A X = B (Aᵀ X = B for adjoint) with A = P L U, batch dims broadcast. `f` holds LU,
    or LUᵀ when f_is_lu_t (the factors of Aᵀ read in place): L and U are then read from the
    other triangle, transposed."""
    n = f.shape[-1]
    batch = torch.broadcast_shapes(f.shape[:-2], b.shape[:-2])
    f, b = f.expand(*batch, n, n), b.expand(*batch, n, b.shape[-1])
    perm = _perm_from_pivots(piv0.expand(*batch, piv0.shape[-1]), n)
    t = f_is_lu_t
    if not adjoint:  # U⁻¹ L⁻¹ Pᵀ B
        y = _tri_solve(f, _permute_rows(b, perm), upper=t, unit=True, trans=t)
        return _tri_solve(f, y, upper=not t, unit=False, trans=t)
    # P L⁻ᵀ U⁻ᵀ B
    y = _tri_solve(f, b, upper=not t, unit=False, trans=not t)
    y = _tri_solve(f, y, upper=t, unit=True, trans=not t)
    return _permute_rows(y, _inverse_perm(perm))


def _linalg_lu_solve(lu, pivots, b, *, left=True, adjoint=False):
    """`linalg.lu_solve`; X A = B (left=False) is Aᵀ Xᵀ = Bᵀ, as ATen solves it."""
    if not _supported(lu, b) or lu.shape[-1] != lu.shape[-2] or pivots.dim() != lu.dim() - 1:
        return NotImplemented
    piv0 = _valid_pivots(pivots, lu.shape[-1])
    if left:
        return _lu_solve_core(lu, piv0, b, adjoint)
    return _lu_solve_core(lu, piv0, b.mT, not adjoint).mT


def _is_vector_rhs(a, b) -> bool:
    """ATen's linalg_solve_is_vector_rhs: B is a (batch of) vector(s)."""
    return b.dim() == 1 or (b.dim() == a.dim() - 1 and tuple(b.shape) == tuple(a.shape[:-1]))


def _solve_ex(a, b, *, left=True, check_errors=False):
    """`_linalg_solve_ex` as ATen computes it: a contiguous real A is factored as Aᵀ and solved
    with adjoint=True (so the LU and pivots it returns are those of Aᵀ, as in eager)."""
    if check_errors or a.shape[-1] != a.shape[-2] or not _supported(a):
        return NotImplemented
    vector = _is_vector_rhs(a, b)
    b_ = b.unsqueeze(-1) if vector else b
    if not _supported(b_):
        return NotImplemented
    use_t = a.is_contiguous()
    f, piv0, info = _lu_core(a, transposed=use_t)  # f: LU of A, or LUᵀ of Aᵀ
    if left:
        x = _lu_solve_core(f, piv0, b_, use_t, f_is_lu_t=use_t)
    else:
        x = _lu_solve_core(f, piv0, b_.mT, not use_t, f_is_lu_t=use_t).mT
    lu = f.mT if use_t else f
    return (x.squeeze(-1) if vector else x), lu, (piv0 + 1).to(torch.int32), info


def _inv_ex(a, *, check_errors=False):
    """`linalg.inv_ex`: ATen solves A X = I with `_linalg_solve_ex`."""
    if check_errors or not _supported(a) or a.shape[-1] != a.shape[-2]:
        return NotImplemented
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device).expand_as(a)
    x, _, _, info = _solve_ex(a, eye)
    return x, info


def _perm_sign(piv0, dtype):
    """det P = (-1)^(number of actual interchanges)."""
    swaps = torch.sum(piv0 != torch.arange(piv0.shape[-1], device=piv0.device), -1)
    return torch.where(swaps % 2 == 1, -1.0, 1.0).to(dtype)


def _det_factors(a):
    """The LU ATen's det and slogdet use: of Aᵀ for a contiguous A (det Aᵀ = det A; it saves
    LAPACK a copy), so pivots, and rounding, are eager's. Returns (LU, 0-based pivots)."""
    transposed = a.is_contiguous()
    f, piv0, _ = _lu_core(a, transposed=transposed)
    return (f.mT if transposed else f), piv0


def _linalg_det(a):
    """`_linalg_det`: (det, LU, pivots) with det = det P * prod(diag U), as ATen."""
    if not _supported(a) or a.shape[-1] != a.shape[-2]:
        return NotImplemented
    lu, piv0 = _det_factors(a)
    det = _perm_sign(piv0, a.dtype) * torch.prod(torch.diagonal(lu, 0, -2, -1), -1)
    return det, lu, (piv0 + 1).to(torch.int32)


def _linalg_slogdet(a):
    """`_linalg_slogdet`: sign = det P * prod(sign u_ii), logabsdet = sum log|u_ii| (so a
    singular matrix gives sign 0 and -inf, as eager)."""
    if not _supported(a) or a.shape[-1] != a.shape[-2]:
        return NotImplemented
    lu, piv0 = _det_factors(a)
    diag = torch.diagonal(lu, 0, -2, -1)
    sign = _perm_sign(piv0, a.dtype) * torch.prod(torch.sign(diag), -1)
    return sign, torch.sum(torch.log(torch.abs(diag)), -1), lu, (piv0 + 1).to(torch.int32)


# ---------------------------------------------------------------------------------------------
# Cholesky


def _cholesky_core(a):
    """potrf (lower) on the lower triangle of a (..., n, n): (L, info int32 (...))."""
    n = a.shape[-1]
    rows, cols = _rows(n, a.device), _cols(n, a.device)
    w = a
    for j in range(n):
        w = _cholesky_step(w, j, rows, cols)
    L = torch.tril(w)
    return L, _first_not_positive(torch.diagonal(L, 0, -2, -1))


def _cholesky_step(w, j: int, rows, cols):
    """Column j of L (the pivot's square root, the column below divided by it) and the rank-1
    update of the trailing lower triangle. A pivot <= 0 gives NaN or inf from here on, where
    LAPACK stops: `info` is what tells the caller, as in eager."""
    s = torch.sqrt(w[..., j : j + 1, j : j + 1])
    col = w[..., :, j : j + 1] / s  # rows below j: column j of L
    below = rows > j
    trailing = w - col * col.mT
    out = torch.where(below & (cols == j), col, torch.where(below & (cols > j) & (cols <= rows), trailing, w))
    return torch.where((rows == j) & (cols == j), s, out)


def _first_not_positive(diag):
    """potrf's info: the first j (1-based) whose pivot is not > 0 (NaN included), else 0."""
    bad = ~(diag > 0)
    first = torch.argmax(bad.to(torch.int32), -1) + 1
    return torch.where(torch.any(bad, -1), first, 0).to(torch.int32)


def _cholesky_ex(a, *, upper=False, check_errors=False):
    """`linalg.cholesky_ex`: the upper factor reads A's upper triangle (LAPACK's uplo='U'), which
    is the lower factor of Aᵀ, transposed."""
    if check_errors or not _supported(a) or a.shape[-1] != a.shape[-2]:
        return NotImplemented
    L, info = _cholesky_core(a.mT if upper else a)
    return (L.mT if upper else L), info


def _cholesky(a, upper=False):
    """Deprecated `cholesky`: raises eager's error for a matrix that is not positive definite
    (ATen checks `info` under the name "cholesky"); capture keeps the check for run time."""
    out = _cholesky_ex(a, upper=upper)
    if out is NotImplemented:
        return out
    aten._linalg_check_errors(out[1], "cholesky", is_matrix=a.dim() == 2)
    return out[0]


def _slogdet_pair(a):
    out = _linalg_slogdet(a)
    return out if out is NotImplemented else out[:2]


TABLE = {
    aten.linalg_lu_factor_ex.default: _lu_factor_ex,
    aten.linalg_lu.default: _linalg_lu,
    aten.lu_unpack.default: _lu_unpack,
    aten.triangular_solve.default: _triangular_solve,
    aten.linalg_solve_triangular.default: _solve_triangular,
    aten.linalg_lu_solve.default: _linalg_lu_solve,
    aten._linalg_solve_ex.default: _solve_ex,
    aten.linalg_inv_ex.default: _inv_ex,
    aten._linalg_det.default: _linalg_det,
    aten._linalg_slogdet.default: _linalg_slogdet,
    aten.linalg_cholesky_ex.default: _cholesky_ex,
    aten.cholesky.default: _cholesky,
    # kept whole by capture (it is CompositeImplicit, but reaches the table as itself)
    aten.linalg_slogdet.default: lambda a: _slogdet_pair(a),
}
