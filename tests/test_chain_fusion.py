"""A linear layer whose activation feeds only another linear layer (a transformer's MLP) runs as one
kernel of kind "chain" (passes/fuse_chain.py, codegen/attention.py's chain mode): the hidden
activation stays in registers, tile by tile of the hidden dim. Numerics against eager on fresh
inputs; kernels and bytes from `uniorch.explain`; cross-compiled for cuda and rocm."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch
from uniorch.api import explain_static
from uniorch.passes.fuse_chain import MAX_HIDDEN

ACTS = {"gelu_tanh": lambda h: F.gelu(h, approximate="tanh"), "relu": F.relu, "silu": F.silu}


class MLP(nn.Module):
    def __init__(self, dim, hidden, out=None, act="gelu_tanh", norm=False, residual=False):
        super().__init__()
        self.norm = nn.LayerNorm(dim) if norm else None
        self.fc = nn.Linear(dim, hidden)
        self.proj = nn.Linear(hidden, out or dim)
        self.act, self.residual = ACTS[act], residual

    def forward(self, x):
        h = self.norm(x) if self.norm is not None else x
        y = self.proj(self.act(self.fc(h)))
        return x + y if self.residual else y


class SwiGLU(nn.Module):
    """Llama's MLP: down(silu(gate(x)) * up(x))."""

    def __init__(self, dim=32, hidden=88):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


def _rel(got, want):
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


def _check_numerics(model, shape, dtype, tol, calls=2):
    cm = uniorch.compile(model, target="interpret")
    for _ in range(calls):
        fresh = torch.randn(*shape, dtype=dtype) * 2 - 0.5
        assert _rel(cm(fresh), model(fresh)) <= tol


def _kinds(rep):
    return sorted(k.kind for k in rep.kernels)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("dim,hidden,act,shape", [
    (32, 128, "gelu_tanh", (20, 32)),
    (24, 100, "relu", (2, 9, 24)),     # widths not powers of two, hidden not a multiple of the tile
    (16, 72, "silu", (3, 5, 16)),
])
def test_mlp_is_one_chain_kernel(dtype, tol, dim, hidden, act, shape):
    torch.manual_seed(0)
    model = MLP(dim, hidden, act=act).eval().to(dtype)
    x = torch.randn(*shape, dtype=dtype)
    rep = uniorch.explain(model, x, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    assert _kinds(rep) == ["chain"], rep
    (k,) = rep.kernels
    # it writes the output and nothing else: the [rows, hidden] activation never goes to memory
    assert k.bytes_written == x.numel() * x.element_size(), k
    _check_numerics(model, shape, dtype, tol)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_pre_norm_residual_mlp(dtype, tol):
    """GPT-2's MLP half-block: the LayerNorm (statistics and normalise) is the chain's prologue,
    the residual its epilogue: one kernel."""
    torch.manual_seed(1)
    model = MLP(32, 128, norm=True, residual=True).eval().to(dtype)
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
        model.norm.bias.uniform_(-0.3, 0.3)
    x = torch.randn(2, 10, 32, dtype=dtype)
    rep = uniorch.explain(model, x, target="interpret")
    assert _kinds(rep) == ["chain"], rep
    (chain,) = rep.kernels
    names = [o for o, _ in chain.ops]
    assert any("rsqrt" in o for o in names) and any("tanh" in o for o in names), names
    # the statistics too are reduced in the chain's row tile: the block moves its minimum bytes
    assert chain.bytes_written == x.numel() * x.element_size(), chain
    assert rep.bytes_moved == rep.bytes_minimum, rep
    _check_numerics(model, (2, 10, 32), dtype, tol)


class PreNormGated(nn.Module):
    """T5's and Llama's gated MLP behind an RMSNorm, with a residual: x + down(act(gate(n)) * up(n))."""

    def __init__(self, dim=32, hidden=88, act="silu"):
        super().__init__()
        self.norm = nn.RMSNorm(dim, eps=1e-6)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        self.act = ACTS[act]
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)

    def forward(self, x):
        n = self.norm(x)
        return x + self.down(self.act(self.gate(n)) * self.up(n))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("shape", [(2, 7, 32), (30, 32)])
def test_gated_mlp_is_one_chain_with_both_products(dtype, tol, shape):
    """silu(gate(x)) * up(x) feeds down: gate and up are both computed per hidden tile in the chain
    (`uniorch.chain_up`), so the kernel reads x and the three weights and writes the output only."""
    torch.manual_seed(2)
    model = SwiGLU().eval().to(dtype)
    x = torch.randn(*shape, dtype=dtype)
    rep = uniorch.explain(model, x, target="interpret")
    assert _kinds(rep) == ["chain"], rep
    esz = x.element_size()
    weights = 3 * 32 * 88 * esz
    assert rep.kernels[0].bytes_read == x.numel() * esz + weights, rep.kernels[0]
    assert rep.kernels[0].bytes_written == x.numel() * esz, rep.kernels[0]
    _check_numerics(model, shape, dtype, tol)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
def test_pre_norm_gated_mlp_is_one_kernel(dtype, tol, act):
    """With the RMSNorm before it (each product normalises its own x tile from row sums) and the
    residual as the epilogue: one kernel at exactly the minimum bytes."""
    torch.manual_seed(3)
    model = PreNormGated(act=act).eval().to(dtype)
    x = torch.randn(2, 9, 32, dtype=dtype)
    rep = uniorch.explain(model, x, target="interpret")
    assert _kinds(rep) == ["chain"], rep
    assert rep.bytes_moved == rep.bytes_minimum, rep
    _check_numerics(model, (2, 9, 32), dtype, tol)


class UpReadTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = SwiGLU()

    def forward(self, x):
        m = self.inner
        up = m.up(x)
        return m.down(F.silu(m.gate(x)) * up), up


def test_up_used_elsewhere_stays_its_own_kernel():
    """An `up` that is also returned must be written: it is not taken into a chain."""
    torch.manual_seed(4)
    model = UpReadTwice().eval()
    x = torch.randn(2, 5, 32)
    rep = uniorch.explain(model, x, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    assert sum(k.bytes_written for k in rep.kernels) >= (2 * 5 * 32 + 2 * 5 * 88) * 4, rep
    cm = uniorch.compile(model, target="interpret")
    fresh = torch.randn(2, 5, 32)
    for got, want in zip(cm(fresh), model(fresh)):
        assert _rel(got, want) <= 1e-5


def test_wide_output_keeps_two_kernels():
    """Past 256 output columns the output tile is not held whole: two contractions, as before."""
    torch.manual_seed(3)
    model = MLP(32, 64, out=320).eval()
    rep = uniorch.explain(model, torch.randn(8, 32), target="interpret")
    assert _kinds(rep) == ["contraction", "contraction"], rep
    _check_numerics(model, (8, 32), torch.float32, 1e-5, calls=1)


def test_long_hidden_keeps_two_kernels():
    """A hidden dim past MAX_HIDDEN would be one program's loop: two kernels instead."""
    model = MLP(16, MAX_HIDDEN + 8).eval()
    rep = explain_static(model, (torch.randn(4, 16),), {}, target="interpret")
    assert _kinds(rep) == ["contraction", "contraction"], rep


class ReturnsHidden(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.proj = nn.Linear(16, 48), nn.Linear(48, 16)

    def forward(self, x):
        h = torch.relu(self.fc(x))
        return self.proj(h), h


def test_hidden_used_elsewhere_is_not_chained():
    torch.manual_seed(4)
    model = ReturnsHidden().eval()
    x = torch.randn(5, 16)
    rep = uniorch.explain(model, x, target="interpret")
    assert "chain" not in _kinds(rep), rep
    cm = uniorch.compile(model, target="interpret")
    fresh = torch.randn(5, 16)
    for got, want in zip(cm(fresh), model(fresh)):
        assert _rel(got, want) <= 1e-5


def test_chain_with_symbolic_rows():
    """dynamic=True: the rows (batch x length) are a size parameter of the chain kernel."""
    torch.manual_seed(5)
    model = MLP(24, 100, norm=True, residual=True).eval()
    cm = uniorch.compile(model, target="interpret", dynamic=True)
    for b, t in ((2, 5), (3, 11)):
        x = torch.randn(b, t, 24)
        assert _rel(cm(x), model(x)) <= 1e-5
    rep = uniorch.explain(model, torch.randn(3, 11, 24), target="interpret")
    assert "chain" in _kinds(rep), rep


@pytest.mark.parametrize("target,binary", [("cuda:sm_90", "cubin"), ("rocm:gfx942", "hsaco")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("gated", [False, True])
def test_chain_cross_compiles(target, binary, dtype, gated):
    torch.manual_seed(6)
    model = PreNormGated(hidden=100) if gated else MLP(32, 100, norm=True, residual=True)
    model = model.eval().to(dtype)
    art = uniorch.compile_aot(model, (torch.randn(2, 9, 32, dtype=dtype),), target, fallback="error")
    assert not art.fallbacks, art.fallbacks
    chains = [k for k in art.kernels if k.kind == "chain"]
    assert len(chains) == 1, [k.kind for k in art.kernels]
    assert chains[0].asm[binary][:4] == b"\x7fELF"


@pytest.mark.parametrize("loss", ["sum", "square_mean"])
def test_mlp_summed_to_a_scalar_compiles(loss):
    """An MLP's output summed over its rows (a validation loss): the sum's per-tile partials ride on
    the second product's epilogue, which a chain kernel does not write, so the two products stay
    two kernels. Joined into a chain before, the kernel failed codegen and the ops ran in PyTorch."""
    gen = torch.Generator().manual_seed(2)
    w1, w2 = torch.randn(32, 16, generator=gen), torch.randn(16, 32, generator=gen)

    def f(x):
        y = F.gelu(x @ w1.T) @ w2.T
        return y.sum() if loss == "sum" else y.square().mean()

    x = torch.randn(4, 16, generator=gen)
    cm = uniorch.compile(f, fallback="error")
    torch.testing.assert_close(cm(x), f(x), rtol=1e-4, atol=1e-4)


def test_checkpointed_mlp_trains_in_kernels():
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(3)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))

        def forward(self, x):
            return (x + checkpoint(self.mlp, x, use_reentrant=False)).square().mean()

    model, ref = Block(), Block()
    ref.load_state_dict(model.state_dict())
    cm = uniorch.compile(model)
    x = torch.randn(4, 16)
    cm(x).backward()
    ref(x).backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
    report = cm.explain(x)
    assert not report.fallbacks and not report.backward.fallbacks
