"""Matmuls of the same input are one kernel (passes/fuse_siblings.py): separate q, k and v
projections load each tile of their input once and feed it to one `tl.dot` per projection, each
with its own weights, epilogue and output. Numerics against eager on fresh inputs; kernels and
bytes from `uniorch.explain`; cross-compiled for cuda and rocm."""
import pytest
import torch
from torch import nn

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


class QKV(nn.Module):
    """BERT's self-attention inputs: three Linear layers of the same hidden state, split into heads."""

    def __init__(self, dim=32, heads=4, kv_dim=None):
        super().__init__()
        self.h = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, kv_dim or dim)
        self.v = nn.Linear(dim, kv_dim or dim)

    def forward(self, x):
        b, t, _ = x.shape
        return tuple(f(x).view(b, t, self.h, -1).transpose(1, 2) for f in (self.q, self.k, self.v))


def _rel(got, want):
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


def _nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("shape", [(2, 9, 32), (3, 70, 48)])
@pytest.mark.parametrize("pre_norm", [False, True], ids=["plain", "pre_norm"])
def test_projections_of_one_input_are_one_kernel(dtype, tol, shape, pre_norm):
    """With a pre-norm, each projection computes the norm in its prologue (its statistics from the
    row tile); the three prologues are the same ops, so the products are siblings of one: one
    kernel reading x once, computing the statistics once, writing q, k and v."""
    torch.manual_seed(1)
    model = (PreNormQKV if pre_norm else QKV)(shape[-1]).eval().to(dtype)
    x = torch.randn(*shape, dtype=dtype)
    rep = uniorch.explain(model, x, target="interpret")
    assert [k.kind for k in rep.kernels] == ["contraction"], str(rep)
    # the input once, the three weights and biases, the three outputs
    assert rep.kernels[0].bytes_read == _nbytes(x, *model.parameters()), str(rep)
    assert rep.kernels[0].bytes_written == 3 * _nbytes(x), str(rep)
    cm = uniorch.compile(model, target="interpret")
    fresh = torch.randn(*shape, dtype=dtype) * 2 + 0.5
    for got, want in zip(cm(fresh), model(fresh)):
        assert _rel(got, want) <= tol


def test_projections_of_different_widths_stay_apart():
    """Grouped-query k and v are narrower than q: other loop sizes, other kernels; still eager's numbers."""
    torch.manual_seed(2)
    model = QKV(32, heads=4, kv_dim=16).eval()
    x = torch.randn(2, 7, 32)
    cm = uniorch.compile(model, target="interpret")
    for got, want in zip(cm(x), model(x)):
        assert _rel(got, want) <= 1e-5
    kinds = [k.kind for k in cm.explain(x).kernels]
    assert kinds.count("contraction") == 2, kinds  # k and v together, q alone


class Dependent(nn.Module):
    """The second product reads the first's result: merging them would make the kernel wait on itself."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(32, 32), nn.Linear(32, 32)

    def forward(self, x):
        y = self.a(x)
        return self.b(x) * torch.sigmoid(self.a(y)), y


def test_a_product_reading_its_sibling_is_not_merged():
    torch.manual_seed(3)
    model = Dependent().eval()
    x = torch.randn(2, 5, 32)
    cm = uniorch.compile(model, target="interpret")
    for got, want in zip(cm(x), model(x)):
        assert _rel(got, want) <= 1e-5


@pytest.mark.parametrize("target,binary", [("cuda:sm_90", "cubin"), ("rocm:gfx942", "hsaco")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sibling_kernel_cross_compiles(target, binary, dtype):
    torch.manual_seed(4)
    model = QKV(64).eval().to(dtype)
    art = uniorch.compile_aot(model, (torch.randn(2, 33, 64, dtype=dtype),), target, fallback="error")
    assert not art.fallbacks, art.fallbacks
    assert [k.kind for k in art.kernels] == ["contraction"], [k.kind for k in art.kernels]
    assert art.kernels[0].asm[binary][:4] == b"\x7fELF"
    assert art.kernels[0].source.source.count("tl.dot(") == 3


class Branches(nn.Module):
    """Inception-style 1x1 convolutions of one input, each with its bias in the accumulator."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(6, 8, 1), nn.Conv2d(6, 8, 1)

    def forward(self, x):
        return torch.relu(self.a(x)), torch.sigmoid(self.b(x))


def test_convolutions_of_one_input_with_biases():
    torch.manual_seed(5)
    model = Branches().eval()
    x = torch.randn(2, 6, 7, 7)
    cm = uniorch.compile(model, target="interpret")
    for got, want in zip(cm(x), model(x)):
        assert _rel(got, want) <= 1e-5
    rep = cm.explain(x)
    assert not rep.fallbacks, rep.fallbacks
    assert [k.kind for k in rep.kernels] == ["contraction"], str(rep)


class PreNormQKV(QKV):
    """ViT's and GPT-style pre-norm attention inputs: LayerNorm, then three separate projections."""

    def __init__(self, dim=32, heads=4):
        super().__init__(dim, heads)
        self.norm = nn.LayerNorm(dim)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return super().forward(self.norm(x))


def test_pre_norm_siblings_cross_compile():
    torch.manual_seed(7)
    model = PreNormQKV(64).eval()
    art = uniorch.compile_aot(model, (torch.randn(2, 33, 64),), "cuda:sm_90", fallback="error")
    assert [k.kind for k in art.kernels] == ["contraction"], [k.kind for k in art.kernels]
    assert art.kernels[0].asm["cubin"][:4] == b"\x7fELF"
    assert art.kernels[0].source.source.count("tl.dot(") == 3
