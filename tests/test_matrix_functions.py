"""matrix_exp as Taylor-18 with scaling and squaring (capture/matrix_functions.py): compiled whole
and matching eager for small and large norms; beyond the compiled squarings, eager runs."""
import pytest
import torch

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_matrix_exp_compiles_and_matches_eager():
    cm = uniorch.compile(torch.linalg.matrix_exp, target="interpret")
    a = torch.randn(2, 4, 4)
    assert not cm.explain(a).fallbacks
    for scale in (0.01, 1.0, 8.0):  # no squaring, a few, several
        a = torch.randn(32, 4, 4) * scale
        exact = torch.linalg.matrix_exp(a.double())
        norm = exact.abs().amax((-1, -2))
        ours, eagers = ((r.double() - exact).abs().amax((-1, -2)) / norm for r in (cm(a), torch.linalg.matrix_exp(a)))
        # rounding after several squarings is chaotic, per matrix, for eager too (a reimplementation
        # of ATen's own polynomial is 10x eager's error on 1% of single draws): compare over a batch,
        # the typical error and the worst
        assert ours.median() <= 1.25 * eagers.median(), (scale, ours.median(), eagers.median())
        assert ours.max() <= 8 * eagers.max(), (scale, ours.max(), eagers.max())


def test_huge_norms_run_eagerly():
    cm = uniorch.compile(torch.linalg.matrix_exp, target="interpret")
    a = torch.randn(3, 3, dtype=torch.float64)
    cm(a)
    big = torch.zeros(3, 3, dtype=torch.float64)
    big[0, 1], big[1, 0] = 1e6, -1e6  # a rotation by 1e6 radians: 2^20 squarings' worth, more than compiled
    torch.testing.assert_close(cm(big), torch.linalg.matrix_exp(big))
