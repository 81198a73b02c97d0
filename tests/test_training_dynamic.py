"""Training over varying sequence lengths: Dynamo's symbolic graphs, their halves compiled once with
symbolic sizes (runtime/symbolic_halves.py). Gradients against eager on fresh inputs."""
import copy

import pytest
import torch
from torch import nn

import uniorch
from uniorch.capture.trace import DIM_NAMES


class TinyLM(nn.Module):
    """A language model's shape of loss: (batch, length) flattened into rows for cross entropy."""

    def __init__(self):
        super().__init__()
        self.fc, self.head = nn.Linear(16, 16), nn.Linear(16, 10)

    def forward(self, x, y):
        logits = self.head(torch.relu(self.fc(x)))
        return nn.functional.cross_entropy(logits.view(-1, 10), y.view(-1))


def _trains_like_eager(model, calls, atol: float = 1e-5):
    """Backward through `uniorch.compile(model)` and an eager copy for each argument tuple of
    `calls` (fresh inputs per length), gradients compared; the compiled model and the last call."""
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    for args in calls:
        for m, run in ((model, cm), (ref, ref)):
            m.zero_grad()
            run(*args).backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=atol,
                                       msg=lambda m: f"{tuple(args[0].shape)} {name}: {m}")
    return cm, args


def test_varying_lengths_train_like_eager_with_one_compile_per_half():
    torch.manual_seed(0)
    cm, (x, y) = _trains_like_eager(TinyLM(), ((torch.randn(2, n, 16), torch.randint(0, 10, (2, n)))
                                               for n in (5, 7, 9, 6, 13)))
    tc = cm.training_compile
    assert len(tc.forward) == len(tc.backward) == 2  # the first length's graphs, then symbolic ones
    for half in (tc.forward[1], tc.backward[1]):
        assert half.cache_size == 1 and half._symbolic, half.recompiles
    rep = cm.explain(x, y)
    assert rep.symbolic and rep.backward.symbolic and not rep.fallbacks
    # cross entropy's gradient scatters into a one-hot of symbolic rows: a scatter kernel
    assert not rep.backward.fallbacks and any(k.kind == "scatter" for k in rep.backward.kernels), str(rep.backward)


class EmbeddingLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos, self.head = nn.Embedding(50, 16), nn.Embedding(32, 16), nn.Linear(16, 50)

    def forward(self, ids):
        h = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        logits = self.head(torch.tanh(h))
        return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 50), ids[:, 1:].reshape(-1))


def test_embedding_gradients_over_varying_lengths_are_scatter_kernels():
    """The token and position embeddings' gradients are scatters of the lengths' rows: kernels
    with the length a kernel parameter (they ran in PyTorch: scatter kernels were static only)."""
    torch.manual_seed(1)
    cm, (ids,) = _trains_like_eager(EmbeddingLM(), ((torch.randint(0, 50, (3, n)),) for n in (6, 9, 7, 12)))
    rep = cm.explain(ids)
    assert rep.backward.symbolic, str(rep.backward)
    scatters = [k for k in rep.backward.kernels if k.kind == "scatter"]
    assert len(scatters) >= 2 and not any("index_put" in f.op for f in rep.backward.fallbacks), str(rep.backward)


class ShiftedLM(nn.Module):
    """transformers' causal-LM loss: logits up to the last position, labels padded with -100 and
    shifted left."""

    def __init__(self):
        super().__init__()
        self.tok, self.head = nn.Embedding(50, 16), nn.Linear(16, 50)

    def forward(self, ids, labels):
        logits = self.head(torch.tanh(self.tok(ids)))[:, :-1]
        labels = nn.functional.pad(labels, (0, 1), value=-100)[:, 1:-1]
        return nn.functional.cross_entropy(logits.reshape(-1, 50), labels.reshape(-1))


def test_label_shift_and_logit_slice_over_varying_lengths_are_kernels():
    """The label shift's pad (forward) and the slice's gradient, a slice_scatter into zeros
    (backward), at symbolic lengths: copy kernels, where they ran in PyTorch and split each half
    in two regions. Gradients against eager at every length."""
    torch.manual_seed(2)
    cm, (ids, _) = _trains_like_eager(ShiftedLM(), ((ids, ids) for ids in (torch.randint(0, 50, (3, n))
                                                                           for n in (6, 9, 7, 12))))
    rep = cm.explain(ids, ids)
    assert rep.symbolic and rep.backward.symbolic, str(rep)
    assert not rep.fallbacks and not rep.backward.fallbacks, str(rep) + str(rep.backward)
    for half, op in ((rep, "constant_pad_nd"), (rep.backward, "slice_scatter")):
        assert any(k.kind == "copy" and any(op in o for o, _ in k.ops) for k in half.kernels), str(half)


class RelativeBias(nn.Module):
    """T5's relative position bias: an embedding looked up by a [length, length] index."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(32, 4)

    def forward(self, x):
        n = x.shape[1]
        rel = torch.arange(n)[None, :] - torch.arange(n)[:, None]
        bias = self.emb(rel.clamp(-15, 15) + 16).permute(2, 0, 1)
        return (bias[None] * x[:, None, :, None]).sum()


def test_embedding_gradient_of_a_square_index_over_varying_lengths_matches_eager():
    """Its gradient scatters length**2 updates. At a symbolic length torch-mlir lowers that
    index_put to `length` updates for `length**2` indices; the scatter kernel took the first
    `length` and T5's bias gradient was wrong. Such a scatter stays in PyTorch
    (fuse_common._scatter_rows_agree)."""
    torch.manual_seed(3)
    cm, (x,) = _trains_like_eager(RelativeBias(), ((torch.randn(2, n),) for n in (6, 9, 7, 12)), atol=1e-4)
    assert cm.explain(x).backward.symbolic


def _index_put(idx, upd):
    return torch.ops.aten.index_put(torch.zeros(64, 32), [idx.clamp(-64, 63)], upd, True)


def test_dims_named_alike_are_one_symbol_of_the_capture():
    """An embedding's gradient: the indices' and the updates' lengths are one size in Dynamo's
    graph; captured apart they were two symbols, and the broadcast between them undecidable (the
    updates were read with a select per element: no kernel could be generated for it)."""
    idx, upd = torch.randint(0, 64, (1, 5)), torch.randn(1, 5, 32)
    for t in (idx, upd):
        torch._dynamo.mark_dynamic(t, 1)
        setattr(t, DIM_NAMES, {1: ("u_s0", 1, 0)})
    cm = uniorch.compile(_index_put, target="interpret")
    torch.testing.assert_close(cm(idx, upd), _index_put(idx, upd))
    rep = cm.explain(idx, upd)
    assert len(rep.symbolic) == 1, rep.symbolic
    assert not any("cannot generate" in f.why for f in rep.fallbacks), rep.fallbacks
    guard = cm._symbolic[0][0]
    key = cm._spec((torch.zeros(1, 7, dtype=torch.long), torch.zeros(1, 8, 32)), {})
    assert "input 1 dim 1 is 8" in guard.check(key)  # one symbol: unequal lengths do not pass
    x, u = torch.randint(0, 64, (1, 9)), torch.randn(1, 9, 32)
    torch.testing.assert_close(cm(x, u), _index_put(x, u))
    assert cm.cache_size == 1


def test_a_symbol_only_a_flattened_dim_gives_is_guarded_and_solved():
    """A loss's backward graph after a graph break sees only the flattened rows, `2*s`: the symbol
    is read off that dim (the guard kept nothing symbolic, and the half compiled per length)."""
    def halves(g, y):
        onehot = torch.zeros(g.shape[0], 10).scatter(1, y.view(-1, 1), -1.0) * g
        return onehot.view(2, -1, 10).sum(1)

    g, y = torch.randn(14, 1), torch.randint(0, 10, (14,))
    for t in (g, y):
        torch._dynamo.mark_dynamic(t, 0)
        setattr(t, DIM_NAMES, {0: ("u_s0", 2, 0)})
    cm = uniorch.compile(halves, target="interpret")
    torch.testing.assert_close(cm(g, y), halves(g, y))
    assert any("(2*" in s for s in cm.explain(g, y).symbolic), cm.explain(g, y).symbolic
    g2, y2 = torch.randn(22, 1), torch.randint(0, 10, (22,))
    torch.testing.assert_close(cm(g2, y2), halves(g2, y2))
    assert cm.cache_size == 1
    guard = cm._symbolic[0][0]
    assert "is 9, not 2*" in guard.check(cm._spec((torch.randn(9, 1), torch.zeros(9, dtype=torch.long)), {}))


class WrittenOutAttention(nn.Module):
    """Attention as most hand-written models have it: q·kᵀ, a causal mask, softmax, then ·v."""

    def __init__(self, width: int = 16, heads: int = 2):
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(width, 3 * width), nn.Linear(width, width)

    def forward(self, x):
        b, t, w = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) * (w // self.heads) ** -0.5
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        p = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        return self.out((p @ v).transpose(1, 2).reshape(b, t, w)).square().mean()


def test_written_out_attention_trains_over_varying_lengths_in_kernels():
    """The softmax's backward, recomputed from the forward's output (runtime/attention_recompute.py),
    read its rows' shape with the length as a size symbol the graph did not define: NameError at
    the second length, and the forward's pair check compared a symbolic size with its limit."""
    torch.manual_seed(0)
    cm, (x,) = _trains_like_eager(WrittenOutAttention(), ((torch.randn(2, n, 16),) for n in (5, 9, 7)))
    assert cm.training_compile.forward[-1]._symbolic
    rep = cm.explain(x)
    assert rep.symbolic and not rep.fallbacks and not rep.backward.fallbacks, (str(rep), str(rep.backward))


@pytest.mark.parametrize("kw", [{}, {"padding_idx": 3}, {"scale_grad_by_freq": True}])
def test_embedding_gradient_at_varying_batch_and_length_is_in_kernels(kw):
    """An embedding looked up by (batch, length) ids: its gradient scattered by the 2-D index was
    lowered to batch-many updates for batch x length indices at symbolic sizes, so it ran in
    PyTorch after a failed compile at every new length. The index is flattened first."""
    import copy

    torch.manual_seed(4)

    class Lookup(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.out = torch.nn.Embedding(50, 16, **kw), torch.nn.Linear(16, 4)

        def forward(self, ids):
            return self.out(self.emb(ids)).pow(2).mean()

    model = Lookup()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model)
    gen = torch.Generator().manual_seed(5)
    for shape in [(2, 8), (3, 21), (4, 5)]:
        ids = torch.randint(0, 50, shape, generator=gen)
        ids.view(-1)[:3] = 3
        cm(ids).backward()
        ref(ids).backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
            p.grad = q.grad = None
    assert not cm.explain(ids).backward.fallbacks


def test_training_recompiles_are_listed_with_dynamos_reason():
    """Training calls at a new batch size and with a new Python float compiled new graphs, and
    `recompiles` (which the inference path fills) stayed empty."""
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l = torch.nn.Linear(8, 4)

        def forward(self, x, scale):
            return self.l(x) * scale

    cm = uniorch.compile(Scaled(), target="interpret")
    for bs, scale in [(4, 1.0), (6, 1.0), (6, 2.0)]:
        cm(torch.randn(bs, 8), scale).sum().backward()
    training = [r for r in cm.recompiles if r.startswith("Dynamo traced the model again")]
    assert len(training) == 2, cm.recompiles
    assert "size mismatch" in training[0] and "1.0" in training[1], training
    assert "recompiles" in str(cm.explain())
    # explain with the call's inputs too (HF's loss setting config.problem_type at the first step)
    assert cm.explain(torch.randn(6, 8), 2.0).recompiles == cm.recompiles
