"""Exact float32 dots on a GPU read a linear layer's weight with its output dim innermost
(codegen/fma_relayout.py, runtime/plan.py): H200 run 3 measured x @ w.T at
14 TFLOP/s where the same sizes as x @ w ran at 46. Which kernels get it is decided in codegen
(checked on the KernelSource for a GPU target, no GPU needed); the plan's copy is checked on the
interpreter: the kernel receives the weight with the new strides and computes what eager does."""
import pytest
import torch
from torch import nn

import uniorch


def _source_of(cm):
    entry = next(iter(cm._cache.values()))
    return [k for region in entry.program.regions for k in region.plan.kernels.values()]


class MatmulNN(nn.Module):
    def __init__(self, k=64, n=96):
        super().__init__()
        self.w = nn.Parameter(torch.randn(k, n))

    def forward(self, x):
        return x @ self.w


@pytest.mark.parametrize("rows, dtype, target, expected", [
    (512, torch.float32, "cuda:sm_90", [[1, 0]]),   # x @ w.T, compute-bound: the weight N-major
    (512, torch.float32, "rocm:gfx942", [[1, 0]]),
    (64, torch.float32, "cuda:sm_90", []),           # few rows: bound by reading the weight once
    (512, torch.bfloat16, "cuda:sm_90", []),         # tensor cores read K-major tiles natively
])
def test_which_linear_weights_are_laid_out_anew(rows, dtype, target, expected):
    model, x = nn.Linear(64, 96).to(dtype), torch.randn(rows, 64, dtype=dtype)
    relayout = _relayout_of(model, x, target)
    assert [order for _, order in relayout] == expected, relayout


def _relayout_of(model, x, target):
    """The KernelSource's relayout of the model's one contraction, compiled for `target`."""
    from uniorch.aot import compile_aot

    (kernel,) = [k for k in compile_aot(model.eval().requires_grad_(False), (x,), target=target).kernels
                 if k.kind == "contraction"]
    return [(i, list(order)) for i, order in kernel.source.relayout]


def test_nn_factors_tf32_and_the_interpreter_are_left_alone():
    x = torch.randn(512, 64)
    assert _relayout_of(MatmulNN(), x, "cuda:sm_90") == []   # w [K, N]: already N innermost
    assert _relayout_of(nn.Linear(64, 96), x, "interpret") == []
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")               # TF32 tensor cores: K-major is fine
        assert _relayout_of(nn.Linear(64, 96), x, "cuda:sm_90") == []
    finally:
        torch.set_float32_matmul_precision(before)


def test_the_plan_passes_the_factor_n_major_and_eager_numbers_result():
    torch.manual_seed(0)
    model, x = nn.Linear(64, 96), torch.randn(300, 64)
    cm = uniorch.compile(model.eval().requires_grad_(False), target="interpret")
    ref = model(x)
    torch.testing.assert_close(cm(x), ref)
    (kernel,) = [k for k in _source_of(cm) if k.source.name.endswith("contraction")]
    # the interpreter's kernel, given the decision a GPU target makes for it
    weight_input = [i for i, r in enumerate(kernel.source.input_ranks) if r == 2 and i != _x_index(kernel)]
    assert len(weight_input) == 1
    kernel.source.relayout = [(weight_input[0], [1, 0])]
    seen = []
    real = kernel.fn

    def spy(inputs, outputs, sizes=None):
        seen.append([tuple(t.stride()) for t in inputs])
        return real(inputs, outputs) if sizes is None else real(inputs, outputs, sizes)

    kernel.fn = spy
    x2 = torch.randn(300, 64) * 3
    torch.testing.assert_close(cm(x2), model(x2))
    assert seen and seen[-1][weight_input[0]] == (1, 96), seen  # [96, 64] stored N-major
    assert model.weight.stride() == (64, 1)  # the parameter itself is untouched


def _x_index(kernel):
    """The input that is the activation: the kernel's A tile (`a_in<i>` in its source)."""
    import re

    (i,) = set(re.findall(r"\ba_in(\d+)_", kernel.source.source))
    return int(i)


class Attention(nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("dtype, exact, expected", [(torch.float32, True, [[0, 1, 3, 2]]), (torch.float32, False, []),
                                                    (torch.bfloat16, True, [])])
def test_attention_keys_are_laid_out_keys_innermost_for_exact_fp32(dtype, exact, expected):
    """Only FMA dots want k keys-innermost: exact float32 ones (PyTorch's math backend). 3xTF32
    (the default float32 attention on sm_80+) and 16-bit dots run on tensor cores, which read k as
    it is."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from uniorch.aot import compile_aot

    q, k, v = (torch.randn(1, 2, 512, 64, dtype=dtype) for _ in range(3))
    with sdpa_kernel([SDPBackend.MATH] if exact else [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        art = compile_aot(Attention(), (q, k, v), target="cuda:sm_90")
    (kernel,) = [k for k in art.kernels if k.kind == "attention"]
    assert [list(order) for _, order in kernel.source.relayout] == expected


def test_relaid_attention_keys_give_eager_numbers():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 80, 64) for _ in range(3))
    cm = uniorch.compile(Attention(), target="interpret")
    cm(q, k, v)
    (kernel,) = [x for x in _source_of(cm) if x.source.name.endswith("attention")]
    kernel.source.relayout = [(i, [0, 1, 3, 2]) for i, r in enumerate(kernel.source.input_ranks) if r == 4]
    q2, k2, v2 = (torch.randn(1, 2, 80, 64) for _ in range(3))
    ref = Attention()(*(t.double() for t in (q2, k2, v2)))
    torch.testing.assert_close(cm(q2, k2, v2).double(), ref, rtol=0, atol=1e-5)


def test_explain_counts_the_copy():
    from uniorch.api import explain_static

    model, x = nn.Linear(64, 96).eval().requires_grad_(False), torch.randn(512, 64)
    gpu, cpu = ([k for k in explain_static(model, (x,), target=t).kernels if k.kind == "contraction"][0]
                for t in ("cuda:sm_90", "interpret"))
    weight = model.weight.numel() * 4
    assert (gpu.bytes_read - cpu.bytes_read, gpu.bytes_written - cpu.bytes_written) == (weight, weight)


class HeadsProjection(nn.Module):
    """A query projection whose output is viewed as heads x head dim and moved heads-first, as
    attention blocks do: the matmul's N is two dims, and its weight is read as [heads, dim, K]."""

    def __init__(self, k=64, heads=4, dim=16):
        super().__init__()
        self.heads, self.proj = heads, nn.Linear(k, heads * dim, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        return self.proj(x).view(b, t, self.heads, -1).transpose(1, 2).sin()


def test_a_weight_read_as_heads_has_both_n_dims_laid_out_innermost():
    from uniorch.aot import compile_aot

    model, x = HeadsProjection().eval().requires_grad_(False), torch.randn(2, 256, 64)
    kernels = [k for k in compile_aot(model, (x,), target="cuda:sm_90").kernels if k.kind == "contraction"]
    orders = [list(order) for k in kernels for _, order in k.source.relayout]
    # H200 run 5: llama_block fp32's q, k and v projections (weights read as [32, 128, 4096]) ran at
    # 14 TFLOP/s, where its MLP's plain [N, K] weights, laid out anew, ran at 44
    assert orders == [[2, 0, 1]], orders


def test_heads_weight_relaid_gives_eager_numbers():
    torch.manual_seed(0)
    model = HeadsProjection().eval().requires_grad_(False)
    cm = uniorch.compile(model, target="interpret")
    cm(torch.randn(2, 40, 64))
    (kernel,) = [k for k in _source_of(cm) if k.source.name.endswith("contraction")]
    (w,) = [i for i, r in enumerate(kernel.source.input_ranks) if r == 3 and i != _x_index(kernel)]
    kernel.source.relayout = [(w, [2, 0, 1])]
    x2 = torch.randn(2, 40, 64)
    torch.testing.assert_close(cm(x2), model(x2))
