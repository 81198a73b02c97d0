"""Dense direct linear algebra rewritten at capture (uniorch/capture/linalg_direct.py): LU,
Cholesky, triangular solves and what ATen builds on them (solve, inv, det, slogdet) compile with
nothing left to eager and match eager on fresh inputs, including LAPACK's pivots and `info`.

Each compile unrolls a loop per matrix row, so the tests share compiled functions across input
values of the same shapes (one compile per function) and keep matrices small."""
import pytest
import torch

import uniorch
from uniorch.capture import linalg_direct

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

_COMPILED = {}


def _compiled(fn):
    """One CompiledModule per function, so tests with same-shaped inputs reuse its compile."""
    if fn not in _COMPILED:
        _COMPILED[fn] = uniorch.compile(fn, target="interpret")
    return _COMPILED[fn]


def _run(fn, *args):
    """(compiled outputs, eager outputs), asserting the call compiled whole."""
    c = _compiled(fn)
    rep = c.explain(*args)
    assert not rep.fallbacks, rep
    out, ref = c(*args), fn(*args)
    return pytree_flat(out), pytree_flat(ref)


def pytree_flat(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _close(out, ref, rtol=1e-4, atol=1e-5):
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.dtype == r.dtype and o.shape == r.shape, (o, r)
        if r.is_floating_point():
            torch.testing.assert_close(o, r, rtol=rtol, atol=atol, equal_nan=True)
        else:
            assert torch.equal(o, r), (o, r)


def _well_conditioned(*shape):
    n = shape[-1]
    return torch.randn(*shape) + n * torch.eye(n)


def _spd(*shape):
    x = torch.randn(*shape)
    return x @ x.mT + shape[-1] * torch.eye(shape[-1])


def _lu_family(a):
    """getrf's factors, pivots and info, and det and slogdet built on them."""
    return (*torch.linalg.lu_factor_ex(a), *torch.linalg.lu(a), torch.linalg.det(a), *torch.linalg.slogdet(a))


def _solve(a, b):
    """ATen factors Aᵀ here (a contiguous A), and solves with adjoint=True."""
    return torch.linalg.solve_ex(a, b)


def test_lu_family():
    _close(*_run(_lu_family, _well_conditioned(2, 3, 3)))


def test_solve():
    _close(*_run(_solve, _well_conditioned(2, 3, 3), torch.randn(2, 3)))


def test_lu_family_singular_and_ties():
    """Small integers keep the steps exact: a pivot among equal |values| (the first one, as
    idamax) and a zero pivot (info, det 0, slogdet (0, -inf)) must come out as LAPACK's. The
    matrices are symmetric because ATen's det and solve factor Aᵀ, its lu_factor A."""
    a = torch.tensor([[[2.0, 4.0, 2.0], [4.0, 8.0, 4.0], [2.0, 4.0, 3.0]],
                      [[-2.0, 2.0, 0.0], [2.0, 3.0, 1.0], [0.0, 1.0, -1.0]]])
    out, ref = _run(_lu_family, a)
    assert ref[2].tolist() == [2, 0]  # one singular matrix, one not
    exact = [0, 1, 2, 3, 4, 5, 7]  # factors, pivots, info, P L U, det's sign
    _close([out[i] for i in exact], [ref[i] for i in exact], rtol=0, atol=0)
    _close(out[6:], ref[6:])  # det, log|det| (0 and -inf for the singular one)
    out, ref = _run(_solve, a, torch.randn(2, 3))
    _close(out[1:], ref[1:])  # info
    _close([out[0][1]], [ref[0][1]])  # the regular system's solution


def _rectangular(a, w):
    return (*torch.linalg.lu(a), *torch.linalg.lu_factor_ex(w))


def test_lu_rectangular():
    _close(*_run(_rectangular, torch.randn(2, 4, 3), torch.randn(3, 4)))


def _inv(a):
    return torch.linalg.inv(a)


def test_inv_and_its_error():
    """linalg.inv raises eager's error for a singular matrix at run time."""
    _close(*_run(_inv, _well_conditioned(3, 3)))
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        _compiled(_inv)(torch.ones(3, 3))


def test_lu_solve_and_unpack():
    """Pivots arrive as data (from eager's lu_factor): permutations are built at run time."""
    def fn(lu, piv, b, c):
        return (torch.linalg.lu_solve(lu, piv, b), torch.linalg.lu_solve(lu, piv, b, adjoint=True),
                torch.linalg.lu_solve(lu, piv, c, left=False), *torch.lu_unpack(lu, piv))

    lu, piv = torch.linalg.lu_factor(torch.randn(2, 3, 3) + torch.eye(3))
    out, ref = _run(fn, lu, piv, torch.randn(2, 3, 2), torch.randn(1, 2, 3))
    _close(out, ref)


def _cholesky_both(a):
    return (*torch.linalg.cholesky_ex(a), *torch.linalg.cholesky_ex(a, upper=True))


def test_cholesky():
    out, ref = _run(_cholesky_both, _spd(2, 4, 4))
    _close(out, ref)


def test_cholesky_info_and_error():
    """`info` is the order of the first non-positive leading minor; linalg.cholesky raises
    eager's error for it at run time."""
    a = _spd(2, 4, 4)
    a[1, 2, 2] = -100.0  # third leading minor of the second matrix
    out, ref = _run(_cholesky_both, a)
    assert ref[1].tolist() == [0, 3]
    _close(out[1::2], ref[1::2])  # info from both triangles
    _close([out[0][0]], [ref[0][0]])  # the good matrix's factor
    fn = lambda a: torch.linalg.cholesky(a)  # noqa: E731
    _close(*_run(fn, _spd(3, 3)))
    with pytest.raises(torch.linalg.LinAlgError, match="order 1"):
        _compiled(fn)(-_spd(3, 3))


TRIANGULAR = {
    "upper": lambda a, b: torch.linalg.solve_triangular(a, b, upper=True),
    "lower_right_unit": lambda a, b: torch.linalg.solve_triangular(a, b.mT, upper=False, left=False,
                                                                   unitriangular=True),
    "deprecated_transposed": lambda a, b: torch.triangular_solve(b, a, upper=False, transpose=True),
}


@pytest.mark.parametrize("case", sorted(TRIANGULAR))
def test_triangular_solves(case):
    """Only the named triangle is read (the other is random), batch dims broadcast."""
    _close(*_run(TRIANGULAR[case], _well_conditioned(2, 3, 3), torch.randn(3, 1, 3, 2)))


def test_large_and_unsupported_stay_eager():
    """Above MAX_N the unrolled loop would be too long to compile: eager, as are fp16 inputs."""
    n = linalg_direct.MAX_N + 1
    rep = uniorch.explain(lambda a: torch.linalg.det(a), _well_conditioned(n, n), target="interpret")
    assert any("det" in f.op for f in rep.fallbacks), rep
    fn = linalg_direct.TABLE[torch.ops.aten.linalg_lu_factor_ex.default]
    assert fn(torch.randn(3, 3, dtype=torch.float16)) is NotImplemented
    assert fn(torch.randn(0, 3, 3)) is NotImplemented
