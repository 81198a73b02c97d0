"""`sort(stable=True)` and `argsort(stable=True)` compile to the (stable) sort kernel: with many
ties, values and indices equal eager's exactly, ascending and descending."""
import pytest
import torch

import uniorch


@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_matches_eager_indices_exactly(descending):
    def f(x):
        return torch.sort(x, stable=True, dim=1, descending=descending), torch.argsort(x, dim=0, stable=True)

    x = torch.randint(0, 4, (6, 50)).float()  # ties everywhere: only a stable sort gives eager's indices
    x[0, 3] = float("nan")
    cm = uniorch.compile(f, target="interpret", fallback="error")
    got, ref = cm(x), f(x)
    assert torch.equal(got[0].indices, ref[0].indices) and torch.equal(got[1], ref[1])
    torch.testing.assert_close(got[0].values, ref[0].values, equal_nan=True)
    assert not cm.explain(x).fallbacks


@pytest.mark.parametrize("largest", [True, False])
def test_unsorted_topk_compiles_and_selects_eagers_elements(largest):
    """topk(sorted=False) (DeepSeek-V3's router) leaves the order unspecified: the compiled call
    picks the same elements as eager, in some order, with indices pointing at them."""
    def f(x):
        return torch.topk(x, 3, dim=-1, largest=largest, sorted=False), x.topk(2, dim=0, sorted=False)

    x = torch.randn(5, 4, 9)  # continuous values: the k extremes are unique
    cm = uniorch.compile(f, target="interpret", fallback="error")
    got, ref = cm(x), f(x)
    for (gv, gi), (rv, ri), dim in zip(got, ref, (-1, 0)):
        assert torch.equal(gv.sort(dim).values, rv.sort(dim).values)
        assert torch.equal(gi.sort(dim).values, ri.sort(dim).values)
        assert torch.equal(torch.gather(x, dim, gi), gv)
    assert not cm.explain(x).fallbacks
