"""Orthogonal factorizations and symmetric eigen/singular values unrolled at capture
(capture/linalg_orthogonal.py): each runs in Triton's interpreter against eager PyTorch (LAPACK)
on fresh random inputs and must leave nothing to eager. Several ops share one compiled function
where they can, since each compile of an unrolled factorization takes seconds."""
import pytest
import torch

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

RTOL, ATOL = 1e-4, 1e-5


def _compiles(fn, *args):
    compiled = uniorch.compile(fn, target="interpret")
    out, ref = compiled(*args), fn(*args)
    rep = compiled.explain(*args)  # the same compiled entry: each compile takes seconds
    assert not rep.fallbacks, rep
    out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    ref = tuple(ref) if isinstance(ref, (tuple, list)) else (ref,)
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype and o.shape == r.shape, (o, r)
        torch.testing.assert_close(o, r, rtol=RTOL, atol=ATOL)


def _qr_family(a, c_left, c_right):
    """LAPACK's Householder convention end to end: geqrf's reflectors, Q from them, Q applied
    four ways, and linalg.qr's three modes (signs included: they are LAPACK's, not arbitrary)."""
    h, tau = torch.geqrf(a)
    q = torch.linalg.householder_product(h[..., : tau.shape[-1]], tau)  # needs m >= n
    applied = [torch.ormqr(h, tau, c_left, True, t) for t in (True, False)]
    applied += [torch.ormqr(h, tau, c_right, False, t) for t in (True, False)]
    reduced = torch.linalg.qr(a)
    complete = torch.linalg.qr(a, "complete")
    r_only = torch.linalg.qr(a, "r")[1]
    return (h, tau, q, *applied, *reduced, *complete, r_only)


@pytest.mark.parametrize("shape", [(4, 3), (2, 2, 3)], ids=["tall", "wide_batched"])
def test_qr_family_matches_lapack(shape):
    a = torch.randn(shape)
    m = shape[-2]
    c_left, c_right = torch.randn(*shape[:-2], m, 2), torch.randn(*shape[:-2], 2, m)
    _compiles(_qr_family, a, c_left, c_right)


def test_qr_zero_column_skips_reflection():
    """LAPACK leaves a column whose part below the diagonal is exactly zero alone (tau = 0, no
    sign flip): the rewrite must too, or R's signs differ from eager's."""
    a = torch.randn(4, 3)
    a[1:, 0] = 0
    a[0, 0] = 2.0
    _compiles(lambda x: torch.geqrf(x), a)


def test_singular_values_and_pinv():
    """One-sided Jacobi on the wider side (a wide batch: Aᵀ's columns); pinv = V·diag(σ⁺)·Uᵀ does
    not depend on the vectors' signs, so it matches eager's. Kept small (two columns) for time:
    the odd-order padding and longer rounds are covered by the symmetric case below."""
    _compiles(lambda a: (torch.linalg.svdvals(a), torch.linalg.pinv(a)), torch.randn(2, 2, 4))


def test_symmetric_eigenvalues_and_hermitian_pinv():
    """Two-sided Jacobi on the lower triangle (the upper one is garbage, as LAPACK never reads it),
    eigenvalues ascending; pinv(hermitian=True) from the same rotations."""
    # fresh eigenvalues of either sign, at least 0.5 from zero: pinv's error grows with the
    # condition number squared, and a near-singular draw failed the tolerance now and then; the
    # upper triangle is noise, which neither LAPACK nor the rewrite may read
    q = torch.linalg.qr(torch.randn(2, 3, 3))[0]
    lam = (torch.rand(2, 3) + 0.5) * torch.where(torch.rand(2, 3) < 0.5, -1.0, 1.0)
    s = (q * lam.unsqueeze(-2)) @ q.mT + torch.randn(2, 3, 3).triu(1)
    _compiles(lambda x: (torch.linalg.eigvalsh(x), torch.linalg.pinv(x, hermitian=True)), s)


def test_vectors_stay_eager():
    """Eigenvectors and singular vectors have no defined sign, so there is no eager answer to
    match: linalg.eigh with vectors is left to PyTorch."""
    rep = uniorch.explain(lambda x: torch.linalg.eigh(x), torch.randn(3, 3), target="interpret")
    assert any("eigh" in f.op for f in rep.fallbacks), rep
