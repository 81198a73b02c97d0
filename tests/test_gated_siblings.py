"""Gated MLPs (Llama's SwiGLU, GeGLU): the gate and up projections of one input are one kernel whose
epilogue multiplies the two accumulators (passes/fuse_siblings.py `_merge_gated`), so the up
projection's output is never written and read back. Numerics against eager on fresh inputs; bytes
against what the layer must move, counted from its shapes; cross-compiled for cuda and rocm."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


class Gated(nn.Module):
    """down(act(gate(x)) * up(x)); wide enough (hidden 384) that it is no single chain kernel."""

    def __init__(self, dim=320, hidden=384, act=F.silu, bias=False, norm=False, keep_up=False):
        super().__init__()
        self.gate, self.up = nn.Linear(dim, hidden, bias=bias), nn.Linear(dim, hidden, bias=bias)
        self.down = nn.Linear(hidden, dim, bias=bias)
        self.act, self.keep_up = act, keep_up
        self.norm = nn.RMSNorm(dim) if norm else None

    def forward(self, x):
        h = self.norm(x) if self.norm is not None else x
        u = self.up(h)
        out = self.down(self.act(self.gate(h)) * u)
        return (out, u) if self.keep_up else out


def _nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


def _check(model, x, tol):
    cm = uniorch.compile(model, target="interpret")
    fresh = torch.randn(x.shape, dtype=x.dtype) * 1.5 + 0.25
    with torch.no_grad():
        got, want = cm(fresh), model(fresh)
    for g, w in zip(*(t if isinstance(t, tuple) else (t,) for t in (got, want))):
        assert ((g.float() - w.float()).abs().max() / w.float().abs().max()).item() <= tol
    return cm.explain(fresh)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("act", [F.silu, F.gelu], ids=["swiglu", "geglu"])
def test_gate_and_up_are_one_kernel_and_the_up_output_is_never_written(dtype, tol, act):
    torch.manual_seed(0)
    model = Gated(act=act).eval().to(dtype)
    x = torch.randn(2, 9, 320, dtype=dtype)
    rep = _check(model, x, tol)
    assert not rep.fallbacks, rep.fallbacks
    assert [k.kind for k in rep.kernels] == ["contraction", "contraction"], str(rep)
    hidden = x.numel() // 320 * 384 * x.element_size()
    g, u, d = model.gate.weight, model.up.weight, model.down.weight
    # gate and up: x and both weights in, the product out; down: the product and its weight in,
    # the output out. Unfused, the up projection's output would be written and read once more.
    assert rep.bytes_moved == _nbytes(x, g, u) + hidden + hidden + _nbytes(d) + _nbytes(x), str(rep)


def test_with_biases_a_pre_norm_and_the_up_output_also_returned():
    """Llama's RMSNorm before both projections, biases added in the epilogue, and the up output
    returned too: still one kernel for gate and up, which then stores the up output as well."""
    torch.manual_seed(1)
    model = Gated(bias=True, norm=True, keep_up=True).eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(3, 7, 320)
    rep = _check(model, x, 1e-5)
    assert not rep.fallbacks, rep.fallbacks
    both = [k for k in rep.kernels if [o for o, _ in k.ops].count("aten.mm.default") >= 2]
    assert len(both) == 1 and any("sigmoid" in o for o, _ in both[0].ops), str(rep)


class Shifted(nn.Module):
    """The gate's epilogue reads the up output at another position (transposed, rolled): the
    sibling's accumulator does not hold that element, so there is no sibling to merge."""

    def __init__(self, how):
        super().__init__()
        self.gate, self.up = nn.Linear(320, 384, bias=False), nn.Linear(320, 384, bias=False)
        self.how = how

    def forward(self, x):
        u = self.up(x)
        return F.silu(self.gate(x)) * (u.transpose(-1, -2) if self.how == "transposed" else torch.roll(u, 1, -1))


@pytest.mark.parametrize("how", ["transposed", "rolled"])
def test_an_up_output_read_elsewhere_than_computed_stays_a_kernel_of_its_own(how):
    torch.manual_seed(2)
    model = Shifted(how).eval()
    rep = _check(model, torch.randn(2, 384 if how == "transposed" else 5, 320), 1e-5)
    assert not rep.fallbacks, rep.fallbacks
    assert sum(k.kind == "contraction" for k in rep.kernels) == 2, str(rep)


@pytest.mark.parametrize("target,binary", [("cuda:sm_90", "cubin"), ("rocm:gfx942", "hsaco")])
def test_gated_kernel_cross_compiles(target, binary):
    torch.manual_seed(3)
    model = Gated().eval().to(torch.bfloat16)
    art = uniorch.compile_aot(model, (torch.randn(2, 33, 320, dtype=torch.bfloat16),), target, fallback="error")
    assert not art.fallbacks, art.fallbacks
    assert [k.kind for k in art.kernels] == ["contraction", "contraction"], [k.kind for k in art.kernels]
    gated = next(k for k in art.kernels if k.source.source.count("tl.dot(") == 2)
    assert gated.asm[binary][:4] == b"\x7fELF"
