"""An index tensor (`torch.arange`, and what is computed from it alone) is recomputed by every
kernel reading it (passes/clone_iotas.py, and fusion seeding fills last), never written by one
kernel for the others. Numerics against eager on fresh inputs; bytes from `uniorch.explain`."""
import torch
from torch import nn

import uniorch


class PositionsAndCausalMask(nn.Module):
    """Learned positions gathered by arange, and a causal mask (`triu`, an arange of its own)
    added by two score computations, as a GPT with two layers does."""

    def __init__(self, vocab=50, ctx=16, dim=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(t))
        mask = torch.full((t, t), float("-inf")).triu(1)
        first = (x @ x.transpose(1, 2) + mask).softmax(-1) @ x
        second = ((2 * x) @ x.transpose(1, 2) + mask).softmax(-1) @ x
        return x, first, second


def test_arange_read_by_several_kernels_is_computed_by_each():
    torch.manual_seed(3)
    model = PositionsAndCausalMask().eval()
    b, t, dim = 2, 12, 16
    ids = torch.randint(0, 50, (b, t))
    with torch.no_grad():
        rep = uniorch.explain(model, ids, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    table = [(k.name, k.kind, k.bytes_read, k.bytes_written) for k in rep.kernels]
    # the positions (int64) and the mask are computed where they are read: what kernels write is
    # x, and per score computation its masked scores and probabilities
    x_bytes, scores_bytes = b * t * dim * 4, b * t * t * 4
    assert sum(k.bytes_written for k in rep.kernels) <= x_bytes + 4 * scores_bytes, table
    cm = uniorch.compile(model, target="interpret")
    with torch.no_grad():
        for _ in range(2):
            fresh = torch.randint(0, 50, (b, t))
            for got, want in zip(cm(fresh), model(fresh)):
                torch.testing.assert_close(got, want)


class PositionsAndDistances(nn.Module):
    """One arange for the position embeddings and for ALiBi-style distances, both returned."""

    def __init__(self, vocab=50, ctx=16, dim=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1])
        x = self.tok(ids) + self.pos(pos)
        return x, (pos[None, :] - pos[:, None]).float() * -0.5


def test_arange_shared_by_two_pointwise_kernels_is_not_written():
    torch.manual_seed(4)
    model = PositionsAndDistances().eval()
    b, t, dim = 2, 12, 16
    ids = torch.randint(0, 50, (b, t))
    with torch.no_grad():
        rep = uniorch.explain(model, ids, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    table = [(k.name, k.kind, k.bytes_read, k.bytes_written) for k in rep.kernels]
    # exactly the outputs are written: the positions never go through memory
    assert sum(k.bytes_written for k in rep.kernels) == (b * t * dim + t * t) * 4, table
    cm = uniorch.compile(model, target="interpret")
    with torch.no_grad():
        fresh = torch.randint(0, 50, (b, t))
        for got, want in zip(cm(fresh), model(fresh)):
            torch.testing.assert_close(got, want)
