"""Shape and layout ops rewritten at capture (uniorch/capture/shape_rewrites.py): each compiles
with nothing left to eager and matches eager PyTorch on fresh random inputs in Triton's
interpreter."""
import pytest
import torch
import torch.nn.functional as F

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _compiles(fn, *args):
    rep = uniorch.explain(fn, *args, target="interpret")
    assert not rep.fallbacks, rep
    out = uniorch.compile(fn, target="interpret")(*[a.clone() for a in args])
    ref = fn(*[a.clone() for a in args])
    return out, ref


def _matches(fn, *args, **tol):
    out, ref = _compiles(fn, *args)
    torch.testing.assert_close(out, ref, equal_nan=True, **tol)


def test_roll_and_fftshift():
    # torch-mlir's roll leaves a tensor.cast no kernel covers; fftshift has no lowering at all
    def fn(x):
        return (torch.fft.fftshift(x), torch.fft.ifftshift(x, dim=(-1,)), torch.roll(x, 3),
                torch.roll(x, (-2, 9), (1, 0)))

    _matches(fn, torch.randn(5, 7))


def test_empty_permuted_compiles():
    # uninitialized values: only the shape and dtype can be compared
    def fn(x):
        return torch.empty_permuted((2, 3, 4), (0, 2, 1)), torch.empty_permuted((), ())

    out, ref = _compiles(fn, torch.randn(1))
    assert [(o.shape, o.dtype) for o in out] == [(r.shape, r.dtype) for r in ref]


def test_batch_norm_with_update():
    def fn(x, w, b, rm, rv):
        return torch.ops.aten._batch_norm_with_update(x, w, b, rm, rv, 0.5, 1e-5)

    out, ref = _compiles(fn, torch.randn(4, 3, 5), torch.randn(3), torch.randn(3), torch.randn(3), torch.rand(3))
    # the cudnn reserve result is empty on CPU; the rest are values
    for o, r in zip(out, ref):
        assert o.shape == r.shape and o.dtype == r.dtype
        torch.testing.assert_close(o, r)


def _lce_options(**kw):
    from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions

    return LinearCrossEntropyOptions(batch_chunk_size=2, **kw)


@pytest.mark.skipif(not hasattr(F, "linear_cross_entropy"), reason="PyTorch without linear_cross_entropy")
def test_linear_cross_entropy_chunked():
    target = torch.tensor([1, 3, 0, -100, 2, 1, 0, 3])

    def fn(x, w, t, b, cw):
        mean = F.linear_cross_entropy(x, w, t, reduction="mean", options=_lce_options())
        total = F.linear_cross_entropy(x, w, t, linear_bias=b, weight=cw, reduction="sum", options=_lce_options())
        none = F.linear_cross_entropy(x, w, t.clamp(min=0), ignore_index=1, reduction="none",
                                      options=_lce_options(allow_retain_graph=False))
        return mean, total, none

    _matches(fn, torch.randn(8, 3), torch.randn(4, 3), target, torch.randn(4), torch.rand(4))


@pytest.mark.parametrize("mode,padding,align", [("bilinear", "zeros", False), ("bilinear", "reflection", True),
                                                ("nearest", "border", False), ("nearest", "reflection", False)])
def test_grid_sampler_3d(mode, padding, align):
    # coordinates well outside [-1, 1]: every padding rule is exercised
    def fn(x, g):
        return F.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=align)

    _matches(fn, torch.randn(2, 3, 4, 5, 6), torch.rand(2, 3, 2, 4, 3) * 3 - 1.5)


@pytest.mark.parametrize("size,align", [((3, 7), False), ((13, 9), True)])
def test_upsample_bilinear2d_antialias(size, align):
    # downscaling widens the filter (support = scale), upscaling keeps the plain triangle
    def fn(x):
        return F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=align)

    _matches(fn, torch.randn(2, 3, 10, 20))


def test_upsample_bilinear2d_antialias_scales_and_same_size():
    # a given scale sets the filter; an unchanged dim is not resampled whatever its scale
    def fn(x):
        return (torch.ops.aten._upsample_bilinear2d_aa(x, [7, 30], False, 0.6, 1.55),
                torch.ops.aten._upsample_bilinear2d_aa(x, [10, 30], False, 1.05, None))

    _matches(fn, torch.randn(1, 2, 10, 20))
