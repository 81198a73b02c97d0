"""A chain's lead product (passes/fuse_chain.py `_take_lead`, codegen/chain_lead.py): the attention
out-projection whose epilogue (bias, residual, a post-norm's LayerNorm) computes the MLP chain's
input rows runs inside the chain kernel, so those rows are never stored. Numerics against eager on
fresh inputs (the interpreter, the cpu backend, gradients), kernels and bytes from `explain`,
cross-compiled for cuda and rocm."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch
from uniorch.api import explain_static


class PostNorm(nn.Module):
    """BERT's half-layer after attention: ln2(h + fc2(gelu(fc1(h)))), h = ln1(x + proj(a)). `a` is
    the attention output with its heads (B, T, H, dh), so the projection reduces over two dims."""

    def __init__(self, dim=32, hidden=64, heads=4):
        super().__init__()
        self.heads = heads
        self.proj = nn.Linear(dim, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.ln2 = nn.LayerNorm(dim)

    def forward(self, a, x):
        h = self.ln1(x + self.proj(a.flatten(-2)))
        return self.ln2(h + self.fc2(F.gelu(self.fc1(h))))


class PreNorm(nn.Module):
    """ViT / GPT-2: h = x + proj(a); h + fc2(gelu(fc1(ln(h))))."""

    def __init__(self, dim=32, hidden=64, heads=4):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.ln = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, a, x):
        h = x + self.proj(a.flatten(-2))
        return h + self.fc2(F.gelu(self.fc1(self.ln(h))))


class PreNormGated(nn.Module):
    """Llama: h = x + o(a); h + down(silu(gate(n)) * up(n)), n = rmsnorm(h)."""

    def __init__(self, dim=32, hidden=88, heads=4):
        super().__init__()
        self.o = nn.Linear(dim, dim, bias=False)
        self.norm = nn.RMSNorm(dim, eps=1e-6)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, a, x):
        h = x + self.o(a.flatten(-2))
        n = self.norm(h)
        return h + self.down(F.silu(self.gate(n)) * self.up(n))


class LeadReadTwice(PostNorm):
    """h is also an output: it must be stored, so the projection keeps its own kernel."""

    def forward(self, a, x):
        h = self.ln1(x + self.proj(a.flatten(-2)))
        return self.ln2(h + self.fc2(F.gelu(self.fc1(h)))), h


MODELS = {"post_norm": PostNorm, "pre_norm": PreNorm, "gated": PreNormGated}


def _inputs(b, t, dim, heads, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(b, t, heads, dim // heads, generator=g).to(dtype)
    x = (torch.randn(b, t, dim, generator=g) * 2 - 0.5).to(dtype)
    return a, x


def _rel(got, want):
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


def _model(name, dim, hidden, heads, dtype, seed=0):
    torch.manual_seed(seed)
    return MODELS[name](dim, hidden, heads).eval().to(dtype)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("dim,hidden,heads", [
    (32, 64, 4),
    (48, 100, 3),   # x's width (and the projection's K) not a power of two: masked tiles
])
def test_lead_is_inside_the_chain(name, dim, hidden, heads, dtype, tol):
    model = _model(name, dim, hidden, heads, dtype)
    a, x = _inputs(2, 9, dim, heads, dtype, seed=1)
    rep = uniorch.explain(model, a, x, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    assert [k.kind for k in rep.kernels] == ["chain"], rep
    (k,) = rep.kernels
    # reads a, x and the weights once; writes the output only (h never goes to memory)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert k.bytes_written == x.numel() * x.element_size(), k
    assert k.bytes_read == weights + a.numel() * a.element_size() + x.numel() * x.element_size(), k
    cm = uniorch.compile(model, target="interpret")
    for seed in (2, 3):
        a, x = _inputs(2, 9, dim, heads, dtype, seed)
        with torch.no_grad():
            assert _rel(cm(a, x), model(a, x)) <= tol


class TokenMajor(PreNorm):
    """nn.MultiheadAttention's out-projection (batch_first): the attention output's rows are
    (token, batch), and the projection's result is transposed to (batch, token) for the residual."""

    def forward(self, a, x):
        h = x + self.proj(a.flatten(-2)).transpose(0, 1)
        return h + self.fc2(F.gelu(self.fc1(self.ln(h))))


class MhaBlock(nn.Module):
    """Pre-LN block around nn.MultiheadAttention, as PyTorch's own transformer tutorials write it."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


@pytest.mark.parametrize("target", ["interpret", "cpu"])
@pytest.mark.parametrize("b,t", [(2, 9), (3, 7)])
def test_lead_with_rows_in_another_order(b, t, target):
    """The lead's rows (token, batch) are the chain's (batch, token) in another order: the row
    tile's index splits into the chain's order, and the projection loads its rows there."""
    if target == "cpu":
        from uniorch.backends.cpu import CpuBackend

        if not CpuBackend.is_available():
            pytest.skip("no cpu backend here")
    torch.manual_seed(0)
    model = TokenMajor().eval()
    a = torch.randn(t, b, 4, 8)
    x = torch.randn(b, t, 32)
    rep = explain_static(model, (a, x), target=target)
    assert [k.kind for k in rep.kernels] == ["chain"], rep
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert rep.kernels[0].bytes_read == weights + _nbytes(a, x) and rep.kernels[0].bytes_written == _nbytes(x)
    cm = uniorch.compile(model, target=target, fallback="error")
    for seed in (1, 2):
        g = torch.Generator().manual_seed(seed)
        a, x = torch.randn(t, b, 4, 8, generator=g), torch.randn(b, t, 32, generator=g)
        with torch.no_grad():
            assert _rel(cm(a, x), model(a, x)) <= 1e-5


def test_multihead_attention_block_projects_inside_the_chain():
    """nn.MultiheadAttention: q/k/v projection, attention, then its out-projection, residual,
    LayerNorm and MLP as one chain kernel (the out-projection was a kernel of its own, writing
    the residual stream for the chain to read)."""
    torch.manual_seed(0)
    model = MhaBlock().eval()
    t = 11
    mask = torch.full((t, t), float("-inf")).triu(1)
    rep = explain_static(model, (torch.randn(2, t, 32), mask), target="interpret")
    assert sorted(k.kind for k in rep.kernels) == ["attention", "chain", "contraction"], rep
    cm = uniorch.compile(model, target="interpret", fallback="error")
    for seed in (1, 2):
        x = torch.randn(2, t, 32, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            assert _rel(cm(x, mask), model(x, mask)) <= 1e-5


def _nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts)


def test_lead_read_elsewhere_keeps_its_kernel():
    torch.manual_seed(0)
    model = LeadReadTwice().eval()
    a, x = _inputs(2, 9, 32, 4, torch.float32, seed=1)
    rep = uniorch.explain(model, a, x, target="interpret")
    assert sorted(k.kind for k in rep.kernels) == ["chain", "contraction"], rep
    cm = uniorch.compile(model, target="interpret")
    a, x = _inputs(2, 9, 32, 4, torch.float32, seed=2)
    with torch.no_grad():
        for got, want in zip(cm(a, x), model(a, x)):
            assert _rel(got, want) <= 1e-5


def test_lead_with_symbolic_rows():
    """dynamic=True: the rows (batch x length) are a size parameter of the chain kernel."""
    model = _model("post_norm", 32, 64, 4, torch.float32)
    cm = uniorch.compile(model, target="interpret", dynamic=True)
    for b, t in ((2, 5), (3, 11)):
        a, x = _inputs(b, t, 32, 4, torch.float32, seed=b * t)
        with torch.no_grad():
            assert _rel(cm(a, x), model(a, x)) <= 1e-5
    rep = explain_static(model, _inputs(3, 11, 32, 4, torch.float32, 0), target="interpret")
    assert [k.kind for k in rep.kernels] == ["chain"], rep


def test_lead_on_the_cpu_backend():
    pytest.importorskip("triton")
    from uniorch.backends.cpu import CpuBackend

    if not CpuBackend.is_available():
        pytest.skip("no cpu backend here")
    model = _model("post_norm", 48, 100, 3, torch.float32)
    cm = uniorch.compile(model, target="cpu", fallback="error")
    a, x = _inputs(2, 9, 48, 3, torch.float32, seed=4)
    with torch.no_grad():
        assert _rel(cm(a, x), model(a, x)) <= 1e-5


def test_lead_gradients():
    """Training: the forward's h is saved for the backward, so there it keeps its kernel; the
    gradients match eager's."""
    torch.manual_seed(0)
    model = PostNorm()
    ref = PostNorm()
    ref.load_state_dict(model.state_dict())
    cm = uniorch.compile(model, target="interpret")
    a, x = _inputs(2, 9, 32, 4, torch.float32, seed=5)
    a1, x1 = a.clone().requires_grad_(), x.clone().requires_grad_()
    a2, x2 = a.clone().requires_grad_(), x.clone().requires_grad_()
    # a random weighting, not a square: sum(LayerNorm(h)^2) is constant up to eps, its gradient
    # rounding noise
    r = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(6))
    (cm(a1, x1) * r).sum().backward()
    (ref(a2, x2) * r).sum().backward()
    assert _rel(x1.grad, x2.grad) <= 1e-4 and _rel(a1.grad, a2.grad) <= 1e-4
    for p, q in zip(model.parameters(), ref.parameters()):
        assert _rel(p.grad, q.grad) <= 1e-4


@pytest.mark.parametrize("target,binary", [("cuda:sm_90", "cubin"), ("rocm:gfx942", "hsaco")])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lead_cross_compiles(target, binary, dtype):
    model = _model("post_norm", 48, 100, 3, dtype)
    art = uniorch.compile_aot(model, _inputs(2, 9, 48, 3, dtype, 0), target, fallback="error")
    assert not art.fallbacks, art.fallbacks
    assert [k.kind for k in art.kernels] == ["chain"], [k.kind for k in art.kernels]
    assert art.kernels[0].asm[binary][:4] == b"\x7fELF"
