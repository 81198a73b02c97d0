"""Fractional max pooling (capture/fractional_pool.py): exact against eager for given random
samples (windows, first max, NaN wins), and compiled whole when the samples are drawn inside."""
import pytest
import torch
import torch.nn.functional as F

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.mark.parametrize("dims,shape,kernel,out", [
    (2, (2, 3, 9, 11), (2, 3), (4, 5)),
    (2, (3, 8, 8), (3, 3), (3, 3)),
    (3, (1, 2, 7, 8, 9), (2, 2, 3), (3, 4, 3)),
])
def test_matches_eager_for_given_samples(dims, shape, kernel, out):
    pool = F.fractional_max_pool2d if dims == 2 else F.fractional_max_pool3d

    def fn(x, samples):
        return pool(x, kernel, output_size=out, return_indices=True, _random_samples=samples)

    x = torch.randn(shape)
    x.view(-1)[[3, 7]] = float("nan")
    x.view(-1)[11] = x.view(-1)[12]  # a tie
    samples = torch.rand(shape[0] if len(shape) == dims + 2 else 1, shape[-dims - 1], dims)
    rep = uniorch.explain(fn, x, samples, target="interpret")
    assert not rep.fallbacks, rep
    got, ref = uniorch.compile(fn, target="interpret")(x, samples), fn(x, samples)
    torch.testing.assert_close(got, ref, equal_nan=True, rtol=0, atol=0)


def test_drawn_samples_compile():
    def fn(x):
        return F.fractional_max_pool2d(x, 2, output_ratio=(0.5, 0.5))

    x = torch.randn(2, 3, 8, 8)
    rep = uniorch.explain(fn, x, target="interpret")
    assert not rep.fallbacks, rep
    y = uniorch.compile(fn, target="interpret")(x)
    assert y.shape == (2, 3, 4, 4)
    # every output is the max of some 2x2 window of its plane
    windows = F.unfold(x.reshape(6, 1, 8, 8), 2).amax(1).reshape(2, 3, -1)
    assert all(bool(torch.isin(y[b, c].flatten(), windows[b, c]).all()) for b in range(2) for c in range(3))
