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
