"""A LayerNorm's or RMSNorm's normalise feeding a linear layer rides on the matmul as its prologue
(passes/fuse.py `try_join_prologue`): the statistics kernel writes only per-row statistics and
the contraction normalises its input tiles, so the normalised activation never goes to memory.
Numerics against eager on fresh inputs; kernels and bytes from `uniorch.explain`."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch
from uniorch.passes.fuse_row_stats import ROW_STATS_MAX


class NormLinear(nn.Module):
    def __init__(self, dim, out, norm="layernorm", bias=True):
        super().__init__()
        self.norm = nn.LayerNorm(dim) if norm == "layernorm" else nn.RMSNorm(dim, eps=1e-6)
        with torch.no_grad():  # not the identity: scale and shift matter
            self.norm.weight.uniform_(0.5, 1.5)
            if getattr(self.norm, "bias", None) is not None:
                self.norm.bias.uniform_(-0.3, 0.3)
        self.fc = nn.Linear(dim, out, bias=bias)

    def forward(self, x):
        return F.gelu(self.fc(self.norm(x)))


def _rel(got, want):
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("shape", [(20, 32), (2, 9, 32), (2, 9, 24), (7, 200)])
def test_normalise_is_the_matmuls_prologue(norm, dtype, tol, shape):
    """Rows up to ROW_STATS_MAX long are one K tile of the matmul: it reduces the statistics from
    the tile too (passes/fuse_row_stats.py) and the norm has no kernel. Longer rows keep the
    statistics kernel, which writes per-row statistics only."""
    torch.manual_seed(0)
    dim = shape[-1]
    model = NormLinear(dim, 96, norm).eval().to(dtype)
    x = torch.randn(*shape, dtype=dtype) * 2 + 0.5
    rep = uniorch.explain(model, x, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    mm = next(k for k in rep.kernels if k.kind == "contraction")
    names = [o for o, _ in mm.ops]
    assert any("mm" in o for o in names) and any("rsqrt" in o or "norm" in o for o in names), names
    rows = x.numel() // dim
    if dim <= ROW_STATS_MAX:
        assert [k.kind for k in rep.kernels] == ["contraction"], rep
        assert any(w in o for o in names for w in ("sum", "mean", "norm")), names
        assert mm.bytes_written == rows * 96 * x.element_size(), mm
    else:
        assert sorted(k.kind for k in rep.kernels) == ["contraction", "reduction"], rep
        stats = next(k for k in rep.kernels if k.kind == "reduction")
        # per-row statistics (float32), never the normalised [rows, dim] activation
        assert stats.bytes_written <= 3 * 4 * rows, stats
    cm = uniorch.compile(model, target="interpret")
    for _ in range(2):
        fresh = torch.randn(*shape, dtype=dtype) * 3 - 1
        assert _rel(cm(fresh), model(fresh)) <= tol


def test_wide_output_keeps_the_normalised_activation():
    """Past MATMUL_PROLOGUE_MAX_N columns the normalise would be recomputed for too many tiles of
    them: the norm's kernel writes it once, as before."""
    torch.manual_seed(1)
    model = NormLinear(32, 512).eval()
    x = torch.randn(8, 32)
    rep = uniorch.explain(model, x, target="interpret")
    stats = next(k for k in rep.kernels if k.kind == "reduction")
    assert stats.bytes_written >= x.numel() * 4, stats
    cm = uniorch.compile(model, target="interpret")
    fresh = torch.randn(8, 32)
    assert _rel(cm(fresh), model(fresh)) <= 1e-5


class PreNormQKV(nn.Module):
    """A pre-norm read by three projections (separate q, k and v layers, as ViT and Llama have)."""

    def __init__(self, dim=32):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.q, self.k, self.v = (nn.Linear(dim, dim) for _ in range(3))

    def forward(self, x):
        h = self.norm(x)
        return self.q(h) * self.k(h) + self.v(h)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("dim", [32, 160])
def test_normalise_read_by_several_projections_is_each_ones_prologue(dtype, tol, dim):
    """Each projection normalises its own tiles (a few flops per element against the 2·N of its
    dot): the normalised activation is never written. Short rows: each also reduces its own
    copy of the statistics, and the norm has no kernel; long ones: one statistics kernel. The
    projections whose prologues are the same become sibling products of one kernel (the one
    whose epilogue multiplies by the others' results stays apart: it reads them)."""
    torch.manual_seed(2)
    model = PreNormQKV(dim).eval().to(dtype)
    x = torch.randn(2, 6, dim, dtype=dtype)
    rep = uniorch.explain(model, x, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    reductions = [k for k in rep.kernels if k.kind == "reduction"]
    if dim <= ROW_STATS_MAX:
        assert not reductions, rep
    else:
        assert len(reductions) == 1 and reductions[0].bytes_written <= 3 * 4 * 12, rep
    products = [k.source.count("tl.dot(") for k in rep.kernels if k.kind == "contraction"]
    assert sorted(products) == [1, 2], rep
    cm = uniorch.compile(model, target="interpret")
    fresh = torch.randn(2, 6, dim, dtype=dtype) * 2 + 1
    assert _rel(cm(fresh), model(fresh)) <= tol


class EmbeddingNormQKV(nn.Module):
    """Token embeddings straight into a pre-norm read by three projections (T5's and Llama's
    first layer)."""

    def __init__(self, vocab=96, dim=32, norm="rmsnorm"):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.norm = nn.LayerNorm(dim) if norm == "layernorm" else nn.RMSNorm(dim, eps=1e-6)
        self.q, self.k, self.v = (nn.Linear(dim, dim, bias=False) for _ in range(3))

    def forward(self, ids):
        h = self.norm(self.emb(ids))
        return self.q(h), self.k(h), self.v(h)


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_norm_of_an_embedding_is_each_projections_prologue(norm, dtype, tol):
    """The lookup is a kernel of its own that writes the embeddings (a gather is never a
    prologue), so each projection reads them and normalises its own tiles: no statistics kernel
    and no normalised activation written. The three prologues are the same: one kernel computes
    the norm once and feeds three products."""
    torch.manual_seed(3)
    model = EmbeddingNormQKV(norm=norm).eval().to(dtype)
    ids = torch.randint(0, 96, (2, 7))
    rep = uniorch.explain(model, ids, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    assert sorted(k.kind for k in rep.kernels) == ["contraction", "pointwise"], rep
    assert next(k for k in rep.kernels if k.kind == "contraction").source.count("tl.dot(") == 3, rep
    emb = 2 * 7 * 32 * torch.tensor([], dtype=dtype).element_size()
    gather = next(k for k in rep.kernels if k.kind == "pointwise")
    assert gather.bytes_written == emb, rep
    cm = uniorch.compile(model, target="interpret")
    fresh = torch.randint(0, 96, (3, 5))
    for got, want in zip(cm(fresh), model(fresh)):
        assert _rel(got, want) <= tol


class NormUsedTwice(nn.Module):
    """The normalised activation is also returned: its kernel writes it, and the statistics stay
    with it."""

    def __init__(self):
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(32), nn.Linear(32, 48)

    def forward(self, x):
        h = self.norm(x)
        return self.fc(h), h


def test_statistics_of_a_returned_normalise_stay_in_its_kernel():
    torch.manual_seed(5)
    model = NormUsedTwice().eval()
    rep = uniorch.explain(model, torch.randn(10, 32), target="interpret")
    assert "reduction" in [k.kind for k in rep.kernels], rep
    cm = uniorch.compile(model, target="interpret")
    fresh = torch.randn(10, 32)
    for got, want in zip(cm(fresh), model(fresh)):
        assert _rel(got, want) <= 1e-5


@pytest.mark.parametrize("target,binary", [("cuda:sm_90", "cubin"), ("rocm:gfx942", "hsaco")])
@pytest.mark.parametrize("dim", [32, 128])
def test_row_statistics_cross_compile(target, binary, dim):
    """The matmul with the whole row in one K tile (128 fp32 columns: smaller output tiles)
    compiles for both GPU vendors."""
    torch.manual_seed(6)
    model = NormLinear(dim, 96).eval()
    art = uniorch.compile_aot(model, (torch.randn(40, dim),), target, fallback="error")
    assert [k.kind for k in art.kernels] == ["contraction"], [k.kind for k in art.kernels]
    assert art.kernels[0].asm[binary][:4] == b"\x7fELF"


def test_sum_of_pieces_before_a_shared_norm_is_read_not_recomputed():
    """An embedding sum feeding a norm read by several projections: copies of the normalise
    would each recompute the sum from its pieces, so the norm keeps its own kernel."""
    torch.manual_seed(4)
    model = PreNormQKV().eval()
    pos = torch.randn(6, 32)

    def fn(x):
        return model(x + pos)

    x = torch.randn(2, 6, 32)
    rep = uniorch.explain(fn, x, target="interpret")
    assert not any(sum("rsqrt" in o or "norm" in o for o, _ in k.ops) and k.kind == "contraction"
                   for k in rep.kernels), rep
    cm = uniorch.compile(fn, target="interpret")
    fresh = torch.randn(2, 6, 32)
    with torch.no_grad():
        assert _rel(cm(fresh), fn(fresh)) <= 1e-5


def test_attention_softmax_is_not_taken_by_the_pv_matmul():
    """Softmax probabilities feeding the PV product stay for uniorch-fuse-attention: one flash kernel."""
    torch.manual_seed(3)

    def attn(q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) * 0.25, -1) @ v

    args = tuple(torch.randn(2, 2, 16, 16) for _ in range(3))
    rep = uniorch.explain(attn, *args, target="interpret")
    assert [k.kind for k in rep.kernels] == ["attention"], [k.kind for k in rep.kernels]


class PostNormBlock(nn.Module):
    """BERT's post-norm residual blocks: LayerNorm(x + o(x)), then LayerNorm(x + proj(gelu(fc(x))))."""

    def __init__(self, dim=32, hidden=64):
        super().__init__()
        self.o, self.ln1 = nn.Linear(dim, dim), nn.LayerNorm(dim)
        self.fc, self.proj, self.ln2 = nn.Linear(dim, hidden), nn.Linear(hidden, dim), nn.LayerNorm(dim)
        with torch.no_grad():
            for ln in (self.ln1, self.ln2):
                ln.weight.uniform_(0.5, 1.5)
                ln.bias.uniform_(-0.3, 0.3)

    def forward(self, x):
        x = self.ln1(x + self.o(x))
        return self.ln2(x + self.proj(F.gelu(self.fc(x))))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("dim", [32, 24])
def test_post_norm_is_the_matmuls_epilogue(dtype, tol, dim):
    """A norm after a linear layer whose output tile holds the whole row: statistics and
    normalise are the layer's epilogue, and the sum before the norm is never written. Here the
    first layer's epilogue computes the MLP chain's input rows, so it is the chain's lead
    (codegen/chain_lead.py) and nothing but the output is written."""
    torch.manual_seed(7)
    model = PostNormBlock(dim).eval().to(dtype)
    x = torch.randn(2, 10, dim, dtype=dtype)
    rep = uniorch.explain(model, x, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    assert [k.kind for k in rep.kernels] == ["chain"], rep
    for k in rep.kernels:
        assert k.bytes_written == x.numel() * x.element_size(), k  # the normalised rows only
        assert sum("sum" in o or "layer_norm" in o for o, _ in k.ops) >= 2, k.ops  # both norms
    cm = uniorch.compile(model, target="interpret")
    for _ in range(2):
        fresh = torch.randn(2, 10, dim, dtype=dtype) * 2 + 0.5
        assert _rel(cm(fresh), model(fresh)) <= tol


def test_post_norm_of_wide_rows_keeps_its_kernel():
    """Rows longer than ROW_STATS_MAX are several output tiles: the norm keeps its own kernel."""
    torch.manual_seed(8)
    dim = ROW_STATS_MAX + 32
    model = nn.Sequential(nn.Linear(dim, dim), nn.LayerNorm(dim)).eval()
    rep = uniorch.explain(model, torch.randn(6, dim), target="interpret")
    assert "reduction" in [k.kind for k in rep.kernels], rep
    cm = uniorch.compile(model, target="interpret")
    fresh = torch.randn(6, dim)
    assert _rel(cm(fresh), model(fresh)) <= 1e-5


def test_post_norm_training_keeps_statistics_for_the_backward():
    """Training saves the norm's statistics for its backward: they leave the forward graph, so
    the norm stays a kernel of its own; the step matches eager."""
    torch.manual_seed(9)
    model = PostNormBlock().train()
    ref = PostNormBlock().train()
    ref.load_state_dict(model.state_dict())
    cm = uniorch.compile(model, target="interpret")
    x = torch.randn(2, 6, 32)
    cm(x).square().mean().backward()
    ref(x).square().mean().backward()
    for (name, a), b in zip(model.named_parameters(), ref.parameters()):
        assert _rel(a.grad, b.grad) <= 1e-4, name


@pytest.mark.parametrize("target,binary", [("cuda:sm_90", "cubin"), ("rocm:gfx942", "hsaco")])
def test_post_norm_cross_compiles(target, binary):
    torch.manual_seed(10)
    model = PostNormBlock(dim=128, hidden=128).eval()
    art = uniorch.compile_aot(model, (torch.randn(2, 10, 128),), target, fallback="error")
    assert [k.kind for k in art.kernels] == ["chain"], [k.kind for k in art.kernels]
    assert all(k.asm[binary][:4] == b"\x7fELF" for k in art.kernels)


def test_norm_read_transposed_by_a_square_matmul():
    """ln(x).T @ w with x square: the matmul's K runs along the norm's rows' other axis, so the
    statistics are not a sum over its A tile's K axis; the result still matches eager."""
    torch.manual_seed(11)
    ln = nn.LayerNorm(16).eval()
    w = torch.randn(16, 8)

    def fn(x):
        return ln(x).t() @ w

    cm = uniorch.compile(fn, target="interpret")
    for _ in range(2):
        x = torch.randn(16, 16) * 2 + 0.5
        with torch.no_grad():
            assert _rel(cm(x), fn(x)) <= 1e-5


class PreNormMHA(nn.Module):
    """nn.MultiheadAttention(batch_first=True) after a LayerNorm: it unsqueezes and permutes the
    normalised input to (T, B, E) before its in-projection (passes/view_rewrites.py)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        with torch.no_grad():
            self.ln.weight.uniform_(0.5, 1.5)
            self.ln.bias.uniform_(-0.3, 0.3)

    def forward(self, x, mask):
        h = self.ln(x)
        return x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_pre_norm_of_batch_first_multihead_attention_is_the_in_projections_prologue(dtype, tol):
    torch.manual_seed(5)
    b, t, dim = 2, 10, 32
    model = PreNormMHA(dim, 4).eval().to(dtype)
    mask = torch.full((t, t), float("-inf")).triu(1).to(dtype)
    x = torch.randn(b, t, dim, dtype=dtype)
    with torch.no_grad():
        rep = uniorch.explain(model, x, mask, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    assert not any(k.kind == "reduction" for k in rep.kernels), [(k.name, k.kind) for k in rep.kernels]
    proj = next(k for k in rep.kernels if k.kind == "contraction" and any("rsqrt" in o for o, _ in k.ops))
    # it reads x and the weights, and writes q, k and v: never the normalised activation
    esz = x.element_size()
    assert proj.bytes_written == 3 * x.numel() * esz, proj
    assert proj.bytes_read <= (x.numel() + 3 * dim * dim + 3 * dim + 2 * dim) * esz, proj
    cm = uniorch.compile(model, target="interpret")
    with torch.no_grad():
        for _ in range(2):
            fresh = torch.randn(b, t, dim, dtype=dtype) * 2 - 0.5
            assert _rel(cm(fresh, mask), model(fresh, mask)) <= tol
