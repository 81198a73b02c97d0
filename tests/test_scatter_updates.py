"""A scatter whose updates a pointwise op computes, gathers included, computes them in its own
kernel (passes/fuse_scatter.py, codegen/scatter_updates.py): the gathered rows of an
embedding bag or a graph network's messages are never written and read back.

Numerics against eager on fresh inputs (duplicate destinations included: the kernel adds them
atomically); kernels and bytes from `uniorch.explain`."""
import pytest
import torch
from torch import nn

import uniorch


def _rel(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6)).item()


class MessagePassing(nn.Module):
    """One graph convolution step as PyG's `propagate` does it: gather the source nodes'
    features, weight them per edge, sum them into the destination nodes."""

    def __init__(self, scatter_add):
        super().__init__()
        self.scatter_add = scatter_add

    def forward(self, x, src, dst, w):
        msg = x[src] * w[:, None]
        out = torch.zeros_like(x)
        if self.scatter_add:
            return out.scatter_add(0, dst[:, None].expand(-1, x.shape[1]), msg)
        return out.index_add(0, dst, msg)


def _graph(nodes, edges, dim, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(nodes, dim, generator=g), torch.randint(0, nodes, (edges,), generator=g),
            torch.randint(0, nodes, (edges,), generator=g), torch.rand(edges, generator=g))


@pytest.mark.parametrize("scatter_add", [False, True])
def test_message_passing_gathers_in_the_scatter(scatter_add):
    """index_add, or scatter_add with the edge index expanded along the features (PyTorch
    Geometric's form, rewritten to whole rows at capture: uniorch/capture/scatter_rows.py)."""
    model = MessagePassing(scatter_add)
    args = _graph(12, 40, 16, seed=0)
    rep = uniorch.explain(model, *args, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    scatters = [k for k in rep.kernels if k.kind == "scatter"]
    assert len(scatters) == 1, rep
    # the messages (40 x 16 floats) are neither written nor read as such: the scatter reads the
    # features, the edge lists and weights, and writes the output
    edges_bytes = 40 * 16 * 4
    assert scatters[0].bytes_read < edges_bytes, rep
    assert not any(k.bytes_written >= edges_bytes for k in rep.kernels), rep
    cm = uniorch.compile(model, target="interpret", fallback="error")
    for seed in (1, 2):
        fresh = _graph(12, 40, 16, seed)  # many edges per node: duplicate destinations
        assert _rel(cm(*fresh), model(*fresh)) <= 1e-5


class PartialScatterAdd(nn.Module):
    """scatter_add forms that are not whole rows: a source larger than the index, dim 1, an index
    expanded over fewer columns than the destination has."""

    def __init__(self, form):
        super().__init__()
        self.form = form

    def forward(self, x, src, dst, w):
        msg = x[src] * w[:, None]
        if self.form == "bigger_src":
            idx = dst[:30, None].expand(30, x.shape[1])
            return torch.zeros_like(x).scatter_add(0, idx, msg)
        if self.form == "dim1":
            idx = (dst % x.shape[1])[None, :16].expand(x.shape[0], 16)
            return torch.zeros_like(x).scatter_add(1, idx, msg[:12, :16] if msg.shape[0] >= 12 else msg)
        idx = dst[:, None].expand(-1, 8)
        return torch.zeros_like(x).scatter_add(0, idx, msg[:, :8])


@pytest.mark.parametrize("form", ["bigger_src", "dim1", "fewer_columns"])
def test_scatter_add_not_whole_rows_keeps_its_answer(form):
    model = PartialScatterAdd(form)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    for seed in (1, 2):
        fresh = _graph(12, 40, 16, seed)
        assert _rel(cm(*fresh), model(*fresh)) <= 1e-5


def test_scatter_add_rows_gradients():
    torch.manual_seed(8)
    x, src, dst, w = _graph(12, 40, 16, seed=9)
    model = MessagePassing(scatter_add=True)
    cm = uniorch.compile(model, target="interpret")
    x1, w1 = x.clone().requires_grad_(), w.clone().requires_grad_()
    x2, w2 = x.clone().requires_grad_(), w.clone().requires_grad_()
    r = torch.randn(12, 16, generator=torch.Generator().manual_seed(10))
    (cm(x1, src, dst, w1) * r).sum().backward()
    (model(x2, src, dst, w2) * r).sum().backward()
    assert _rel(x1.grad, x2.grad) <= 1e-5 and _rel(w1.grad, w2.grad) <= 1e-5


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("mode", ["mean", "sum"])
def test_embedding_bag_rows_are_not_written(mode, dtype, tol):
    """In bf16 the decomposition rounds each gathered row to bf16 and widens it for the f32 sum:
    both steps run in the scatter kernel too."""
    torch.manual_seed(3)
    bag = nn.EmbeddingBag(40, 24, mode=mode).to(dtype)
    ids = torch.randint(0, 40, (30,))
    offsets = torch.tensor([0, 4, 4, 11, 20])  # an empty bag too
    weights = torch.rand(30).to(dtype) if mode == "sum" else None
    rep = uniorch.explain(bag, ids, offsets, per_sample_weights=weights, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    rows = 30 * 24 * dtype.itemsize
    assert not any(k.bytes_written >= rows for k in rep.kernels), rep
    cm = uniorch.compile(bag, target="interpret", fallback="error")
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 40, (30,), generator=g)
    w = torch.rand(30, generator=g).to(dtype) if mode == "sum" else None
    with torch.no_grad():
        got, want = cm(ids, offsets, per_sample_weights=w), bag(ids, offsets, per_sample_weights=w)
    assert got.dtype == want.dtype and _rel(got, want) <= tol


def test_updates_reading_the_destination_stay_apart():
    """The kernel writes its destination in place, so updates computed from the destination
    itself are computed before it, by a kernel of their own."""

    class SelfUpdate(nn.Module):
        def forward(self, x, src, dst):
            return x.index_add(0, dst, x[src] * 2.0)

    model = SelfUpdate()
    x, src, dst, _ = _graph(10, 25, 8, seed=5)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    assert _rel(cm(x, src, dst), model(x, src, dst)) <= 1e-5
    rep = cm.explain(x, src, dst)
    assert [k.kind for k in rep.kernels].count("scatter") == 1
    assert any(k.kind == "pointwise" and k.bytes_written >= 25 * 8 * 4 for k in rep.kernels), rep


def test_half_updates_accumulate_in_float():
    """index_add of fp16 values into an fp16 tensor: the scatter accumulates in f32 (the
    destination is widened, then rounded once), the updates widen in the kernel."""

    class HalfAdd(nn.Module):
        def forward(self, x, idx, src):
            return x.index_add(0, idx, src * 2, alpha=3)

    g = torch.Generator().manual_seed(6)
    args = (torch.randn(6, 5, generator=g).half(), torch.randint(0, 6, (9,), generator=g),
            torch.randn(9, 5, generator=g).half())
    cm = uniorch.compile(HalfAdd(), target="interpret", fallback="error")
    got, want = cm(*args), HalfAdd()(*args)
    assert got.dtype == torch.float16
    assert _rel(got, want) <= 2e-3


@pytest.mark.parametrize("target,binary", [("cuda:sm_90", "cubin"), ("rocm:gfx942", "hsaco")])
def test_message_passing_cross_compiles(target, binary):
    art = uniorch.compile_aot(MessagePassing(False), _graph(12, 40, 16, seed=0), target, fallback="error")
    assert not art.fallbacks, art.fallbacks
    k = [k for k in art.kernels if k.kind == "scatter"]
    assert len(k) == 1 and k[0].asm[binary][:4] == b"\x7fELF"


class Histogram(nn.Module):
    def forward(self, p, bucket):
        return torch.zeros(p.shape[0], 6, dtype=p.dtype).scatter_add(1, bucket, p * 2)


class OneHotLoss(nn.Module):
    def forward(self, logits, labels):
        target = torch.zeros_like(logits).scatter_(1, labels[:, None], 1.0)
        return -(target * logits.log_softmax(-1)).sum(-1)


def test_scatter_computes_its_coordinates():
    """A full index tensor along dim 1: torch-mlir's coordinate pair per element and the
    flattened updates are computed in the scatter kernel, not written (they were 4 kernels)."""
    g = torch.Generator().manual_seed(11)
    p, bucket = torch.rand(16, 30, generator=g), torch.randint(0, 6, (16, 30), generator=g)
    rep = uniorch.explain(Histogram(), p, bucket, target="interpret")
    assert [k.kind for k in rep.kernels] == ["scatter"], rep
    assert rep.kernels[0].bytes_read <= p.numel() * 4 + bucket.numel() * 8 + 16 * 6 * 4, rep
    cm = uniorch.compile(Histogram(), target="interpret", fallback="error")
    for seed in (12, 13):
        g = torch.Generator().manual_seed(seed)
        p, bucket = torch.rand(16, 30, generator=g), torch.randint(0, 6, (16, 30), generator=g)
        assert _rel(cm(p, bucket), Histogram()(p, bucket)) <= 1e-5


def test_one_hot_scatter_is_one_kernel():
    g = torch.Generator().manual_seed(14)
    logits, labels = torch.randn(32, 10, generator=g), torch.randint(0, 10, (32,), generator=g)
    rep = uniorch.explain(OneHotLoss(), logits, labels, target="interpret")
    assert [k.kind for k in rep.kernels].count("scatter") == 1 and len(rep.kernels) == 2, rep
    cm = uniorch.compile(OneHotLoss(), target="interpret", fallback="error")
    g = torch.Generator().manual_seed(15)
    logits, labels = torch.randn(32, 10, generator=g), torch.randint(0, 10, (32,), generator=g)
    assert _rel(cm(logits, labels), OneHotLoss()(logits, labels)) <= 1e-5


class ComputedBuckets(nn.Module):
    """The index is computed too (torch-mlir reads it twice: for the coordinates, and in the generic
    that flattens the updates, whose coordinate results nobody reads)."""

    def forward(self, p):
        bucket = (p * 6).long().clamp(max=5)
        return torch.zeros(p.shape[0], 6).scatter_add(1, bucket, p)


def test_computed_index_is_computed_in_the_scatter():
    g = torch.Generator().manual_seed(16)
    p = torch.rand(8, 20, generator=g)
    rep = uniorch.explain(ComputedBuckets(), p, target="interpret")
    assert [k.kind for k in rep.kernels] == ["scatter"], rep
    cm = uniorch.compile(ComputedBuckets(), target="interpret", fallback="error")
    p = torch.rand(8, 20, generator=torch.Generator().manual_seed(17))
    assert _rel(cm(p), ComputedBuckets()(p)) <= 1e-6
