"""Outputs without computed elements: zero-element tensors (allocated with eager's shape, strides
and dtype, no kernel and no ATen call) and torch.Size results; ops reading an empty tensor into a
non-empty result still compute correctly."""
import torch

import uniorch


def _check_like(got, ref):
    if isinstance(ref, (tuple, list)):
        assert type(got) is type(ref)  # torch.return_types.topk stays a named result, bundled too
        assert len(got) == len(ref)
        for g, r in zip(got, ref):
            _check_like(g, r)
        return
    assert got.shape == ref.shape and got.stride() == ref.stride() and got.dtype == ref.dtype
    assert got.device == ref.device
    torch.testing.assert_close(got, ref)


def fn(x, y):
    a = x.sum(1)                 # [0]
    b = torch.cat([a, a]) * 3    # [0]
    c = torch.softmax(y, -1)     # non-empty: a real kernel
    return b, c, x.t().contiguous(), torch.topk(x, 0, dim=1), x.to(torch.int8)


def test_zero_element_ops_are_allocated_not_run():
    x, y = torch.randn(0, 5), torch.randn(3, 7)
    cm = uniorch.compile(fn, target="interpret", fallback="error")
    _check_like(cm(x, y), fn(x, y))
    rep = cm.explain(x, y)
    assert not rep.fallbacks
    assert rep.compiled_ops == rep.captured_ops
    assert rep.allocated_ops >= 5
    assert "zero-element ops allocated" in str(rep)
    assert [k.kind for k in rep.kernels] != []  # the softmax still compiles to a kernel


def test_reductions_of_empty_tensors_into_values_stay_exact():
    # outputs with elements computed from empty inputs: not allocations; eager's value must come back
    def g(x):
        return x.sum(0), x.prod(0), x.mean(0)
    x = torch.randn(0, 4)
    cm = uniorch.compile(g, target="interpret")
    for got, ref in zip(cm(x), g(x)):
        torch.testing.assert_close(got, ref, equal_nan=True)


def test_zero_element_bundle_round_trip(tmp_path):
    x, y = torch.randn(0, 5), torch.randn(3, 7)
    art = uniorch.compile_aot(fn, (x, y), target="interpret")
    art.save(str(tmp_path / "b"))
    loaded = uniorch.load(str(tmp_path / "b"))
    _check_like(loaded(x, y), fn(x, y))


def test_size_outputs_stay_torch_size(tmp_path):
    # torch's pytree rebuilds torch.Size as a tuple; eager code calls .numel() on these
    def g(x):
        return torch.broadcast_shapes((3, 1), (1, 4)), {"s": [x.shape]}, x + 1
    x = torch.randn(2, 3)
    for fn_ in (uniorch.compile(g, target="interpret"),):
        got = fn_(x)
        assert type(got[0]) is torch.Size and got[0] == torch.Size([3, 4])
        assert type(got[1]["s"][0]) is torch.Size
    art = uniorch.compile_aot(g, (x,), target="interpret")
    art.save(str(tmp_path / "s"))
    got = uniorch.load(str(tmp_path / "s"))(x)
    assert type(got[0]) is torch.Size and type(got[1]["s"][0]) is torch.Size


def _folds(fn, *args):
    """Compiles with nothing left to PyTorch and matches eager (values, NaNs, dtypes)."""
    rep = uniorch.explain(fn, *args, target="interpret")
    assert not rep.fallbacks, rep
    got, ref = uniorch.compile(fn, target="interpret")(*args), fn(*args)
    got = got if isinstance(got, (tuple, list)) else (got,)
    ref = ref if isinstance(ref, (tuple, list)) else (ref,)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype
        torch.testing.assert_close(g, r, equal_nan=True)


def test_ops_reading_only_empty_tensors_fold_into_fills():
    # det of 0x0 is 1 (slogdet: sign 1, log 0), a sum over nothing 0, a mean NaN, mm with an
    # empty inner dim zeros: fixed by shapes, so the ops after them compile too
    def g(a, u, v, m, n):
        det = torch.linalg.det(a) + 1
        sign, logabs = torch.linalg.slogdet(a)
        return (det, sign, logabs, torch.logdet(a), torch.linalg.vecdot(u, v), (m @ n) * 2 + 1,
                m.sum(1).exp(), m.mean(1), m.prod(1), m.amax(0))
    _folds(g, torch.randn(0, 0), torch.randn(0), torch.randn(0), torch.randn(3, 0), torch.randn(0, 4))


def test_cat_drops_zero_element_inputs():
    # block_diag pads with zero-width blocks; a legacy 1-d empty(0) joins any rank
    def g(x, y, e):
        return torch.block_diag(x, y), torch.cat([e, y, e], 1), torch.cat([x[:, :0], x], 1) * 2
    _folds(g, torch.randn(1, 5), torch.randn(2, 3), torch.randn(0))


def test_cat_keeps_empty_inputs_that_promote():
    # an empty float64 input still makes the result float64: the cat stays as it is
    def g(x, e):
        return torch.cat([x, e])
    x, e = torch.randn(3), torch.randn(0, dtype=torch.float64)
    got, ref = uniorch.compile(g, target="interpret")(x, e), g(x, e)
    assert got.dtype == ref.dtype == torch.float64
    torch.testing.assert_close(got, ref)


def test_empty_results_of_multi_result_ops_are_allocated():
    # train-mode batch norm's cudnn reserve is empty on CPU; the op itself compiles
    def g(x, w, b, rm, rv):
        return torch.ops.aten._batch_norm_with_update(x, w, b, rm, rv, 0.1, 1e-5)
    _folds(g, torch.randn(4, 3, 2), torch.randn(3), torch.randn(3), torch.randn(3), torch.rand(3))
