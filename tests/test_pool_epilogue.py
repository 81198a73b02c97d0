"""Pooling as a contraction's epilogue (passes/fuse.py try_join_window, codegen/contraction_emit.py
pooled): a pooling whose windows do not overlap, over a convolution's output after its BatchNorm /
activation, runs in the convolution's kernel with one accumulator per window element, so the
full-size activation is never written. Numerics against eager on fresh inputs (fp32 and bf16);
kernel kinds and bytes from `uniorch.explain`; cases that must stay two kernels stay correct."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch
from test_conv_fusion import _bn


def _run(model, x, dtype=torch.float32):
    model = model.eval().to(dtype)
    x = x.to(dtype)
    rep = uniorch.explain(model, x, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    cm = uniorch.compile(model, target="interpret")
    fresh = torch.randn_like(x)
    with torch.no_grad():
        got, want = cm(fresh), model(fresh)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    tol = 1e-4 if dtype == torch.float32 else 1e-2
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        err = ((g.float() - w.float()).abs().max() / w.float().abs().max().clamp_min(1e-6)).item()
        assert err <= tol, err
    return rep


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("pool,size", [
    (nn.MaxPool2d(2), 8),               # conv → BN → ReLU → max pool, the VGG / small-CNN stem
    (nn.MaxPool2d(2), 9),               # odd size: the last row and column are never pooled
    (nn.MaxPool2d((1, 2)), 8),          # a window along one dim only
    (nn.MaxPool2d(2, stride=3), 11),    # windows with gaps between them
    (nn.AvgPool2d(2), 8),               # a sum, then the division in the same epilogue
])
def test_conv_bn_relu_pool_is_one_kernel(pool, size, dtype):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), _bn(8), nn.ReLU(), pool)
    rep = _run(model, torch.randn(2, 3, size, size), dtype)
    assert [k.kind for k in rep.kernels] == ["contraction"]
    # the conv's input, weights and BN parameters read once, only the pooled tensor written
    assert rep.bytes_moved <= 1.01 * rep.bytes_minimum, (rep.bytes_moved, rep.bytes_minimum)


def test_depthwise_conv_pool_is_one_kernel():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.ReLU6(), nn.MaxPool2d(2))
    rep = _run(model, torch.randn(2, 8, 8, 8))
    assert [k.kind for k in rep.kernels] == ["contraction"]


def test_pool_then_activation_joins():
    torch.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(4, 6, 3), nn.AvgPool2d(2), nn.Sigmoid())
    rep = _run(model, torch.randn(2, 4, 10, 10))
    assert [k.kind for k in rep.kernels] == ["contraction"]


class _LinearPool(nn.Module):
    """A Linear over tokens, then a max pool along the sequence (windows on the matmul's rows)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 16)

    def forward(self, x):
        return F.max_pool1d(F.gelu(self.lin(x)).transpose(1, 2), 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model,shape", [
    (nn.Sequential(nn.Conv1d(3, 8, 3), nn.ReLU(), nn.MaxPool1d(2)), (2, 3, 17)),  # through a 2-d view
    (_LinearPool(), (2, 6, 8)),
], ids=["conv1d", "linear-rows"])
def test_one_dim_pools_ride_on_their_producer(model, shape, dtype):
    torch.manual_seed(6)
    rep = _run(model, torch.randn(*shape), dtype)
    assert [k.kind for k in rep.kernels] == ["contraction"]


class _ConvAndPool(nn.Module):
    """The activation is read by the pooling and by a sum: it must be written anyway."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        h = F.relu(self.conv(x))
        return F.max_pool2d(h, 2), h.sum()


@pytest.mark.parametrize("model", [
    nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.MaxPool2d(3, stride=2)),   # overlapping windows
    nn.Sequential(nn.Conv2d(3, 8, 3), nn.MaxPool2d(2, return_indices=True)),   # indices too
    _ConvAndPool(),
], ids=["overlapping", "indices", "read-twice"])
def test_pool_stays_separate_where_fusing_would_cost(model):
    torch.manual_seed(3)
    rep = _run(model, torch.randn(2, 3, 11, 11))
    assert [k.kind for k in rep.kernels][:2] == ["contraction", "reduction"]


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
def test_pooled_kernel_cross_compiles(target, tmp_path, monkeypatch):
    """Four accumulators and their epilogues through Triton's real stages to cubin (ptxas-checked)
    and hsaco."""
    from cross_util import cross_compile, ptxas_tools
    from uniorch.ir import to_mlir

    monkeypatch.setenv("UNIORCH_CACHE_DIR", str(tmp_path))
    torch.manual_seed(4)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), _bn(8), nn.ReLU(), nn.MaxPool2d(2)).eval()
    text = to_mlir(model, (torch.randn(2, 3, 16, 16),), {}).operation.get_asm(enable_debug_info=True)
    check_ptx = target.startswith("cuda") and bool(ptxas_tools())
    rep = cross_compile("conv_pool", text, target, check_ptx=check_ptx)
    assert not rep.failures and not rep.unsupported, (rep.failures, rep.unsupported)
    assert rep.kernels == 1
    if check_ptx:
        assert rep.ptxas_ok == 1
