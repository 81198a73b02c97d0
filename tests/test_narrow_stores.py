"""A bf16 model's values cross kernel boundaries in bf16 (passes/narrow_stores.py, and fusion
leaving a widening to the kernel that reads it): a LayerNorm, a matmul's epilogue or a residual
sum stores 16-bit values, not fp32 copies of them, and the reader widens on load. Bytes from
`uniorch.explain`, numerics against eager on fresh inputs, attention still one flash kernel."""
import importlib.util
import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch


def _run(model, *xs):
    model = model.eval().to(torch.bfloat16)
    xs = tuple(x.to(torch.bfloat16) for x in xs)
    rep = uniorch.explain(model, *xs, target="interpret")
    assert not rep.fallbacks, rep.fallbacks
    cm = uniorch.compile(model, target="interpret")
    fresh = tuple(torch.randn_like(x) for x in xs)
    with torch.no_grad():
        got, want = cm(*fresh), model(*fresh)
    assert got.dtype == want.dtype == torch.bfloat16
    err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
    assert err <= 1e-2, err
    return rep


class _NormLinearNorm(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.ln1, self.lin, self.ln2 = nn.LayerNorm(d), nn.Linear(d, d), nn.LayerNorm(d)

    def forward(self, x):
        return self.ln2(self.lin(self.ln1(x)) + x)


def test_norm_and_matmul_outputs_stay_bf16():
    torch.manual_seed(0)
    rep = _run(_NormLinearNorm(), torch.randn(2, 9, 32))
    act = 2 * 9 * 32 * 2  # one bf16 activation
    # every kernel writes bf16 activations: the norm's output and the residual sum, never an fp32 copy
    for k in rep.kernels:
        assert k.bytes_written <= act, (k.name, k.bytes_written)


class _Block(nn.Module):
    """Pre-norm attention block, written out: norm → qkv → softmax(q kᵀ) v → out + residual."""

    def __init__(self, d=32, h=4):
        super().__init__()
        self.h = h
        self.ln, self.qkv, self.out = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, -1)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        p = torch.softmax(q @ k.transpose(-1, -2) / (d // self.h) ** 0.5, -1)
        return x + self.out((p @ v).transpose(1, 2).reshape(b, t, d))


def test_attention_block_bf16_fewer_bytes_one_flash_kernel():
    torch.manual_seed(1)
    rep = _run(_Block(), torch.randn(2, 16, 32))
    kinds = [k.kind for k in rep.kernels]
    assert kinds.count("attention") == 1, kinds
    act = 2 * 16 * 32 * 2
    for k in rep.kernels:
        # the qkv projection writes q, k and v (3 activations); nothing writes an fp32 activation
        assert k.bytes_written <= 3 * act, (k.name, k.bytes_written)


@pytest.mark.parametrize("act", [nn.GELU(), nn.SiLU()])
def test_mlp_hidden_stays_bf16(act):
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(32, 64), act, nn.Linear(64, 32), nn.LayerNorm(32))
    rep = _run(model, torch.randn(4, 8, 32))
    hidden = 4 * 8 * 64 * 2
    assert max(k.bytes_written for k in rep.kernels) <= hidden



class _SwiGLU(nn.Module):
    def __init__(self, d=32, h=64):
        super().__init__()
        self.g, self.u, self.d = (nn.Linear(d, h, bias=False), nn.Linear(d, h, bias=False),
                                  nn.Linear(h, d, bias=False))

    def forward(self, x):
        return self.d(F.silu(self.g(x)) * self.u(x))


def test_gated_mlp_projections_store_bf16():
    """The up projection's accumulator is rounded to bf16 by the op reading it (silu(g) * u):
    the rounding moves into the up projection's kernel (narrow_stores' readers' truncations,
    fuse's rounding producers), which stores bf16, not its f32 accumulator."""
    torch.manual_seed(4)
    rep = _run(_SwiGLU(), torch.randn(2, 8, 32))
    hidden = 2 * 8 * 64 * 2
    for k in rep.kernels:
        assert k.bytes_written <= hidden, (k.name, k.bytes_written)


def test_conv_rounded_by_its_reader_stores_bf16():
    """conv → BN → ReLU6 → global average pool: the reduction's body rounds the conv's f32
    accumulator first. The pool's sums are the conv's tile partials (passes/tile_stats.py), so
    the conv stores neither the f32 accumulator nor the rounded bf16 tensor: 4 bytes per image
    and channel."""
    torch.manual_seed(5)
    bn = nn.BatchNorm2d(16)
    bn.running_var.uniform_(0.5, 2.0)
    model = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), bn, nn.ReLU6(),
                          nn.AdaptiveAvgPool2d(1))
    rep = _run(model, torch.randn(2, 8, 8, 8))
    conv = [k for k in rep.kernels if k.kind == "contraction"]
    assert len(conv) == 1 and conv[0].bytes_written == 2 * 16 * 4, [(k.name, k.bytes_written) for k in rep.kernels]


def _two_sdpa():
    """q for two SDPA calls over grouped-query k and v (the FileCheck test's model,
    tests/filecheck/Inputs/sdpa_twice_bf16.py): SDPA's math widens bf16 q to float32, and the
    widened q is read through the grouped-query reshape by both attentions."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "filecheck", "Inputs", "sdpa_twice_bf16.py")
    spec = importlib.util.spec_from_file_location("sdpa_twice_bf16", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.M()


def test_widening_read_through_a_reshape_leaves_q_in_bf16():
    """The widening moves below the reshape (narrow_stores), so the q projection stores bf16 and
    each attention kernel widens on load: it stored q in float32, twice the bytes both ways."""
    torch.manual_seed(3)
    rep = _run(_two_sdpa(), torch.randn(2, 8, 32), torch.randn(2, 1, 8, 8))
    act = 2 * 8 * 32 * 2
    assert [k.kind for k in rep.kernels].count("attention") == 2, [k.kind for k in rep.kernels]
    for k in rep.kernels:
        assert k.bytes_written <= act, (k.name, k.bytes_written)
    # bf16 q, k and v, the bias, and the other attention's output (the sum rides on one of them)
    most = act + 2 * 8 * 32 * 2 + 2 * 8 * 8 * 2 + act
    assert all(k.bytes_read <= most for k in rep.kernels if k.kind == "attention"), \
        [(k.name, k.bytes_read) for k in rep.kernels]
