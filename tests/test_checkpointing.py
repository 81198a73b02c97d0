"""Training with activation checkpointing (`torch.utils.checkpoint`, transformers'
`gradient_checkpointing_enable()`): AOTAutograd recomputes the checkpointed ops in the backward
and wraps seeded ops (SDPA, for its dropout) in RNG-state higher-order ops, which neither export
nor torch-mlir take; at dropout 0 they are unwrapped (runtime/rng_hops.py). Gradients against
eager on fresh inputs, and nothing left to PyTorch."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


class _Attention(nn.Module):
    def __init__(self, d: int = 32, heads: int = 4, dropout: float = 0.0):
        super().__init__()
        self.qkv, self.out, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), heads
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.drop(self.out(y.transpose(1, 2).reshape(b, t, d)))


class _Checkpointed(nn.Module):
    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.blocks = nn.ModuleList(_Attention(dropout=dropout) for _ in range(2))
        self.norm = nn.LayerNorm(32)

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return self.norm(x)


def _assert_trains_like_eager(eager, compiled, make_inputs, loss_of, steps=2, random_ops=()):
    for step in range(steps):
        inputs = make_inputs()
        torch.manual_seed(step)  # the same draws, where PyTorch draws them (UNIORCH_FALLBACK_RANDOM)
        loss_of(eager, inputs).backward()
        torch.manual_seed(step)
        loss_of(compiled, inputs).backward()
        for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")
        eager.zero_grad()
        compiled.zero_grad()
    tc = compiled.training_compile
    assert tc.forward and tc.backward and tc.failure is None and not tc.eager_graphs
    rep = compiled.explain()
    assert rep.kernels and all(f.op in random_ops for f in rep.fallbacks), str(rep)
    assert rep.backward.kernels and not rep.backward.fallbacks, str(rep.backward)


def test_checkpointed_attention_blocks_train_like_eager():
    torch.manual_seed(0)
    eager = _Checkpointed()
    compiled = uniorch.compile(copy.deepcopy(eager), target="interpret")
    _assert_trains_like_eager(eager, compiled, lambda: torch.randn(2, 9, 32),
                              lambda m, x: m(x).square().mean())


def test_checkpointed_dropout_is_saved_not_replayed(monkeypatch):
    """Dropout inside a checkpoint draws numbers the recomputation would have to replay: its mask
    is saved for the backward instead (runtime/rng_hops.py). Before, the forward graph ran wholly
    in PyTorch. PyTorch draws here (UNIORCH_FALLBACK_RANDOM=1), so eager's masks can be compared."""
    monkeypatch.setenv("UNIORCH_FALLBACK_RANDOM", "1")
    torch.manual_seed(0)
    eager = _Checkpointed(dropout=0.2)
    compiled = uniorch.compile(copy.deepcopy(eager), target="interpret")
    _assert_trains_like_eager(eager, compiled, lambda: torch.randn(2, 9, 32),
                              lambda m, x: m(x).square().mean(), random_ops=("aten.native_dropout.default",))


def test_transformers_gradient_checkpointing_trains_like_eager():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1)
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      use_cache=False)
    eager = transformers.LlamaForCausalLM(config).train()
    eager.gradient_checkpointing_enable()
    compiled = uniorch.compile(copy.deepcopy(eager), target="interpret")
    _assert_trains_like_eager(eager, compiled, lambda: torch.randint(0, 96, (2, 9)),
                              lambda m, ids: m(input_ids=ids, labels=ids).loss, steps=1)


def test_the_backward_of_a_checkpointed_block_compiles_once():
    """Non-reentrant checkpointing saves the RNG state for its recompute: a uint8 tensor of
    symbolic length in the backward's inputs that no op reads. Compiled at its example's length,
    the backward compiled again at the first real call (length 0): seconds on the first step."""
    class Attention(torch.nn.Module):  # SDPA: recorded with the RNG state checkpointing saves
        def __init__(self):
            super().__init__()
            self.qkv, self.out = torch.nn.Linear(16, 48), torch.nn.Linear(16, 16)

        def forward(self, x):
            q, k, v = self.qkv(x).view(2, 8, 3, 2, 8).permute(2, 0, 3, 1, 4)
            return self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(2, 8, 16))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block, self.head = Attention(), torch.nn.Linear(16, 4)

        def forward(self, x):
            return self.head(checkpoint(self.block, x, use_reentrant=False))

    model = Net()
    eager = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    for _ in range(2):
        x = torch.randn(2, 8, 16)
        cm(x).sum().backward()
        eager(x).sum().backward()
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert [c.cache_size for c in cm.training_compile.backward] == [1], \
        [c.recompiles for c in cm.training_compile.backward]
