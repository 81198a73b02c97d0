"""A norm's statistics over a convolution's or linear layer's output rows come from per-chunk
partial sums its epilogue writes (passes/tile_stats.py, codegen/contraction_stats.py): BatchNorm
in training (2-d after a conv, 1-d after a linear layer), GroupNorm, and a squeeze-excite mean of
an activation computed in the conv's epilogue. Numerics (outputs and running statistics) against
eager on fresh inputs, fp32 and bf16, on the interpreter and the cpu backend; the training path's
gradients; `explain`'s bytes: no statistics kernel reads the activation; the kernels compile for
sm_90 and gfx942 with the tile a multiple of the chunk.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch
from uniorch.api import explain_static


class ConvBN(nn.Module):
    """ResNet-style: conv, BatchNorm with batch statistics, ReLU, then a pool or a second conv."""

    def __init__(self, then: str = "pool"):
        super().__init__()
        self.then = then
        self.conv = nn.Conv2d(8, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16, momentum=0.3)
        self.conv2 = nn.Conv2d(16, 8, 3, padding=1)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        return F.avg_pool2d(h, 2) if self.then == "pool" else self.conv2(h)


class ConvReluBN(nn.Module):
    """Conv, ReLU, then BatchNorm (the statistics of an activation the epilogue computes)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)

    def forward(self, x):
        return F.max_pool2d(self.bn(torch.relu(self.conv(x))), 2)


class ConvGN(nn.Module):
    """A diffusion UNet block: conv, GroupNorm, SiLU."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1)
        self.gn = nn.GroupNorm(4, 16)

    def forward(self, x):
        return F.silu(self.gn(self.conv(x)))


class ConvGNPerChannel1d(nn.Module):
    """wav2vec2's first feature-extractor layer: a strided conv1d, GroupNorm with a group per
    channel (its mean read back at the unit channels-per-group dim), GELU, the next conv."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(1, 16, 10, stride=5, bias=False)
        self.gn = nn.GroupNorm(16, 16)
        self.conv2 = nn.Conv1d(16, 16, 3, stride=2, bias=False)

    def forward(self, x):
        return self.conv2(F.gelu(self.gn(self.conv(x))))


class LinearBN(nn.Module):
    """BatchNorm1d over a batch of 128 rows after a linear layer: chunks along the tile's M."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 48)
        self.bn = nn.BatchNorm1d(48)

    def forward(self, x):
        return torch.relu(self.bn(self.fc(x)))


class SqueezeExcite(nn.Module):
    """MobileNet: an eval-mode BatchNorm and hardswish on the conv, then the SE's spatial mean."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.fc = nn.Conv2d(16, 16, 1)

    def forward(self, x):
        h = F.hardswish(self.bn(self.conv(x)))
        s = torch.sigmoid(self.fc(F.adaptive_avg_pool2d(h, 1)))
        return h * s


class PooledHead(nn.Module):
    """A classifier's head: conv, eval-mode BatchNorm, ReLU6, global average pool, linear. The
    pool's sums are the conv's partials: its output is never written."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 10)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(F.relu6(self.bn(self.conv(x))), 1).flatten(1))


class ResidualPooledHead(PooledHead):
    """ResNet's last block pooled: relu(bn(conv(x)) + x), the residual loaded beside the tile."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(16, 16, 3, padding=1, bias=False)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(F.relu(self.bn(self.conv(x)) + x), 1).flatten(1))


class StemResidualPooledHead(ResidualPooledHead):
    """The residual is itself a conv's output (every ResNet block after the first): the summand is
    on two products' tiles, and the later one's epilogue loads the earlier one's stored output."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(8, 16, 3, padding=1)

    def forward(self, x):
        x = F.relu(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(F.relu(self.bn(self.conv(x)) + x), 1).flatten(1))


CASES = {
    "bn-pool": (lambda: ConvBN("pool").train(), (2, 8, 8, 8)),
    "bn-conv": (lambda: ConvBN("conv").train(), (2, 8, 8, 8)),
    "relu-bn": (lambda: ConvReluBN().train(), (2, 8, 8, 8)),
    "groupnorm": (lambda: ConvGN(), (2, 8, 8, 8)),
    "groupnorm-per-channel-1d": (lambda: ConvGNPerChannel1d(), (2, 1, 400)),
    "bn1d": (lambda: LinearBN().train(), (128, 32)),
    "squeeze-excite": (lambda: SqueezeExcite().eval(), (2, 8, 8, 8)),
    "pooled-head": (lambda: PooledHead().eval(), (2, 8, 8, 8)),
    "residual-pooled-head": (lambda: ResidualPooledHead().eval(), (2, 16, 8, 8)),
    # 7 x 7 pixels (a 224-px ResNet's last stage): no power of two divides them, each image's
    # pixels are one chunk, one tile's
    "bn-pool-7x7": (lambda: ConvBN("pool").train(), (2, 8, 7, 7)),
    "residual-pooled-head-7x7": (lambda: ResidualPooledHead().eval(), (3, 16, 7, 7)),
    "stem-residual-pooled-head-7x7": (lambda: StemResidualPooledHead().eval(), (3, 8, 7, 7)),
}


def _err(got, want) -> float:
    return ((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-6)).item()


def _activation_bytes(model, shape, dtype) -> int:
    """Bytes of the first layer's output: the tensor the statistics reduce."""
    out = {}
    first = model.conv if hasattr(model, "conv") else model.fc
    h = first.register_forward_hook(lambda m, i, o: out.setdefault("y", o))
    with torch.no_grad():
        copy.deepcopy(model)(torch.randn(shape, dtype=dtype))
    h.remove()
    return out["y"].numel() * out["y"].element_size()


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 2e-2)], ids=["fp32", "bf16"])
def test_statistics_read_partials_not_the_activation(name, dtype, tol):
    make, shape = CASES[name]
    torch.manual_seed(3)
    model = make().to(dtype)
    x = torch.randn(shape, dtype=dtype)
    rep = explain_static(copy.deepcopy(model), (x,))
    assert not rep.fallbacks, str(rep)
    y_bytes = _activation_bytes(model, shape, dtype)
    # the contraction writes per-chunk partials beside its output ...
    stats = [k for k in rep.kernels if "tile statistics" in k.source]
    assert len(stats) == 1 and stats[0].kind == "contraction", str(rep)
    # ... and the kernel summing them reads a fraction of the activation: every kernel that reads
    # the activation is one that needs its elements (a normalise, a pool, the next conv)
    readers = [k for k in rep.kernels if k.bytes_read >= y_bytes and k is not stats[0]]
    assert len(readers) <= 1, str(rep)
    small = [k for k in rep.kernels if k.kind == "reduction" and k.bytes_read < y_bytes // 4]
    assert small, str(rep)

    want_model, got_model = copy.deepcopy(model), copy.deepcopy(model)
    cm = uniorch.compile(got_model, target="interpret", fallback="error")
    for seed in (5, 6):  # twice: the running statistics update from the first call's state
        xi = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
        with torch.no_grad():
            want = want_model(xi)
            got = cm(xi)
        assert _err(got, want) < tol, (name, _err(got, want))
    for (n, b1), (_, b2) in zip(got_model.named_buffers(), want_model.named_buffers()):
        if b1.is_floating_point():
            assert _err(b1, b2) < tol, (n, _err(b1, b2))


@pytest.mark.parametrize("name", ["pooled-head", "residual-pooled-head", "residual-pooled-head-7x7",
                                  "stem-residual-pooled-head-7x7"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_pooled_activation_is_never_written(name, dtype):
    """The pooled activation is the pool's only reader's: no kernel writes it, in bf16 too (where
    the summand rounds the BatchNorm's output to 16 bits before the sum, as eager does)."""
    make, shape = CASES[name]
    torch.manual_seed(3)
    model = make().to(dtype)
    rep = explain_static(model, (torch.randn(shape, dtype=dtype),))
    y_bytes = _activation_bytes(model, shape, dtype)
    stem = 1 if hasattr(model, "stem") else 0  # the stem's output is the residual: stored
    assert sum(1 for k in rep.kernels if k.bytes_written >= y_bytes // 4) == stem, str(rep)
    assert len(rep.kernels) == 3 + stem, str(rep)  # the conv with its partials, their sum, the linear layer


@pytest.mark.parametrize("name", ["bn-pool", "groupnorm", "bn1d", "residual-pooled-head", "bn-pool-7x7",
                                  "stem-residual-pooled-head-7x7"])
def test_cpu_backend_matches_eager(name):
    make, shape = CASES[name]
    torch.manual_seed(4)
    model = make()
    want_model = copy.deepcopy(model)
    cm = uniorch.compile(model, target="cpu", fallback="error")
    x = torch.randn(shape, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        got, want = cm(x), want_model(x)
    assert _err(got, want) < 1e-4
    for (n, b1), (_, b2) in zip(model.named_buffers(), want_model.named_buffers()):
        if b1.is_floating_point():
            assert _err(b1, b2) < 1e-4, n


def test_statistics_stay_accurate_far_from_zero():
    """The partials are centred per chunk and merged by Chan's update: an activation with a mean
    of 1e3 and unit spread keeps fp32 eager's variance (a plain sum of squares would not)."""
    torch.manual_seed(0)
    model = ConvBN("pool").train()
    with torch.no_grad():
        model.conv.bias.fill_(1000.0)
    want_model = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    x = torch.randn(2, 8, 8, 8, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        got, want = cm(x), want_model(x)
        ref = copy.deepcopy(want_model).double()(x.double())
    assert _err(got.double(), ref) < 10 * max(_err(want.double(), ref), 1e-6)
    assert _err(model.bn.running_var, want_model.bn.running_var) < 1e-4


def test_training_gradients_match_eager():
    torch.manual_seed(1)
    model = ConvBN("conv").train()
    want_model = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    x = torch.randn(2, 8, 8, 8, generator=torch.Generator().manual_seed(3))
    cm(x).square().mean().backward()
    want_model(x).square().mean().backward()
    for (n, p1), (_, p2) in zip(model.named_parameters(), want_model.named_parameters()):
        # (the conv's bias has no effect through BatchNorm: its gradient is rounding noise)
        torch.testing.assert_close(p1.grad, p2.grad, rtol=1e-4, atol=1e-6, msg=n)


@pytest.mark.parametrize("width", [64, 256])
def test_layernorm_after_a_linear_layer_gets_no_partials(width):
    """A row that one tile holds is summed whole in the layer's epilogue (fuse_row_stats); a longer
    one (BERT-base's 768) by one kernel that also normalises it from registers, where partials
    would only add bytes: no partials for a norm over a linear layer's features."""
    model = nn.Sequential(nn.Linear(16, width), nn.LayerNorm(width)).eval()
    rep = explain_static(model, (torch.randn(8, 16),))
    assert not any("tile statistics" in k.source for k in rep.kernels), str(rep)
    if width == 64:
        assert len(rep.kernels) == 1, str(rep)


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_kernels_compile_for_gpus_with_whole_chunks(target, dtype):
    torch.manual_seed(0)
    model = ConvGN().to(dtype)
    art = uniorch.compile_aot(model, (torch.randn(2, 8, 16, 16, dtype=dtype),), target=target)
    assert not art.fallbacks
    k = next(k for k in art.kernels if "tile statistics" in k.asm["triton"])
    assert ("cubin" if target.startswith("cuda") else "hsaco") in k.asm
    # the chunk length the source sums over divides the tile along that axis
    src = k.asm["triton"]
    line = next(ln for ln in src.splitlines() if "tl.static_range" in ln)
    block, chunk = line.split("tl.static_range(")[1].split(")")[0].split(" // ")
    assert int(k.source.constexprs[block]) % int(chunk) == 0, (line, k.source.constexprs)


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_kernels_compile_for_gpus_with_a_chunk_per_tile(target, dtype):
    """7 x 7 pixels: the programs step by the 49 pixels of an image, the block's 15 more masked."""
    torch.manual_seed(0)
    model = ResidualPooledHead().eval().to(dtype)
    art = uniorch.compile_aot(model, (torch.randn(3, 16, 7, 7, dtype=dtype),), target=target)
    assert not art.fallbacks
    k = next(k for k in art.kernels if "tile statistics" in k.asm["triton"])
    assert ("cubin" if target.startswith("cuda") else "hsaco") in k.asm
    src = k.asm["triton"]
    assert "offs_n = pid_n * 49 + tl.arange(0, BLOCK_N)" in src, src
    assert "sel = tl.arange(0, BLOCK_N)[None, :] < 49" in src, src
    assert k.source.constexprs["BLOCK_N"] == 64 and k.source.grid[0] == 3, (k.source.constexprs, k.source.grid)


def test_bf16_convolution_stores_its_output_in_16_bits():
    """The normalise is the only reader of the convolution's widened output once the statistics
    come from partials: it widens on load, so the convolution writes bf16, not an f32 copy."""
    torch.manual_seed(0)
    model = ConvGN().to(torch.bfloat16)
    x = torch.randn(2, 8, 8, 8, dtype=torch.bfloat16)
    rep = explain_static(model, (x,))
    conv = next(k for k in rep.kernels if k.kind == "contraction")
    numel = 2 * 16 * 8 * 8
    partials = 2 * (numel // 64) * 4  # S and Q: one f32 per chunk of 64 rows
    assert conv.bytes_written == numel * 2 + partials, str(rep)


def test_a_chunk_shorter_than_a_tile():
    """3 pixels per image (a 1-d convolution's output): the chunk is one tile's, the tile the
    smallest tl.dot takes (16 rows)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(8, 16, 3, bias=False), nn.BatchNorm1d(16), nn.ReLU(),
                          nn.AdaptiveAvgPool1d(1)).eval()
    with torch.no_grad():
        model[1].running_var.uniform_(0.5, 2.0)
    x = torch.randn(4, 8, 5)
    rep = explain_static(model, (x,))
    assert not rep.fallbacks and any("tile statistics" in k.source for k in rep.kernels), str(rep)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    xi = torch.randn(4, 8, 5, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert _err(cm(xi), model(xi)) < 1e-5
