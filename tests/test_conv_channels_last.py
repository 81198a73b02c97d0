"""Convolutions on tensor cores read NHWC (codegen/conv_layout.py): K enumerated window-major with
the channels innermost, the input and filters laid out channels-last by the launch plan.

H200 run 3 measured resnet_stack's bf16 3x3 convolutions at 31 TFLOP/s: read from NCHW, every
element of a tile is a 2-byte scalar load. Checked here without a GPU: which convolutions get the
layout (decided in codegen for the target), that the sm_90 kernel compiled for the arguments the
plan passes (as Triton's JIT compiles it) copies its tiles with 16-byte `cp.async` instead of
scalar loads, and that the GPU kernel, run on Triton's interpreter with the plan's relayout,
computes what eager does.
"""
from __future__ import annotations

import collections
import copy
import re

import pytest
import torch
from torch import nn

import uniorch
from uniorch.aot import compile_aot


def _conv_kernels(model, x, target):
    return [k for k in compile_aot(model.eval().requires_grad_(False), (x,), target=target).kernels
            if k.kind == "contraction"]


@pytest.fixture
def exact_convs():
    """Float32 convolutions exact (FMA units), as eager's cuDNN with TF32 off; by default they
    follow `torch.backends.cudnn.allow_tf32` (True): TF32 on sm_80+."""
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = before


def _bn(c):
    bn = nn.BatchNorm2d(c)
    bn.running_mean.uniform_(-0.5, 0.5)
    bn.running_var.uniform_(0.5, 2.0)
    return bn


def _block(cin=64, cout=64, k=3, stride=1, groups=1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, groups=groups, bias=False),
                         _bn(cout), nn.ReLU())


@pytest.mark.parametrize("make, shape, dtype, target, expected", [
    (lambda: _block(), (4, 64, 14, 14), torch.bfloat16, "cuda:sm_90", [[0, 2, 3, 1], [0, 2, 3, 1]]),
    (lambda: _block(), (4, 64, 14, 14), torch.bfloat16, "rocm:gfx942", [[0, 2, 3, 1], [0, 2, 3, 1]]),
    (lambda: _block(64, 128, 1, 2), (4, 64, 14, 14), torch.float16, "cuda:sm_90", [[0, 2, 3, 1], [0, 2, 3, 1]]),
    (lambda: _block(3, 64, 7, 2), (2, 3, 32, 32), torch.bfloat16, "cuda:sm_90", []),    # 3 channels: as it is
    (lambda: _block(64, 64, 3, 1, 64), (4, 64, 14, 14), torch.bfloat16, "cuda:sm_90", []),  # depthwise: no channel K
    (lambda: _block(), (4, 64, 14, 14), torch.float32, "cuda:sm_90", []),   # exact fp32: FMA units keep NCHW
    (lambda: _block(), (4, 64, 14, 14), torch.bfloat16, "interpret", []),
])
def test_which_convolutions_read_channels_last(make, shape, dtype, target, expected, exact_convs):
    torch.manual_seed(0)
    (kernel,) = _conv_kernels(make().to(dtype), torch.randn(shape, dtype=dtype), target)
    assert [list(o) for _, o in kernel.source.relayout] == expected, kernel.source.relayout


def test_tf32_convolutions_read_channels_last(exact_convs):
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = True
        (kernel,) = _conv_kernels(_block(), torch.randn(4, 64, 14, 14), "cuda:sm_90")
    finally:
        torch.set_float32_matmul_precision(before)
    assert [list(o) for _, o in kernel.source.relayout] == [[0, 2, 3, 1], [0, 2, 3, 1]]


@pytest.mark.parametrize("allow_tf32, matmul, conv_dot, mm_dot", [
    (True, "highest", "tf32", "ieee"),   # PyTorch's defaults: cuDNN takes TF32, cuBLAS does not
    (False, "highest", "ieee", "ieee"),
    (False, "high", "ieee", "tf32"),
    (True, "high", "tf32", "tf32"),
])
def test_float32_convolutions_follow_cudnn_allow_tf32(allow_tf32, matmul, conv_dot, mm_dot, exact_convs):
    """As eager's and Inductor's cuDNN convolutions do (TF32 by default from sm_80), apart from the
    matmul precision that decides the model's other dots."""
    model = nn.Sequential(_block(), nn.Flatten(), nn.Linear(64 * 7 * 7, 10))
    before = torch.get_float32_matmul_precision()
    try:
        torch.backends.cudnn.allow_tf32 = allow_tf32
        torch.set_float32_matmul_precision(matmul)
        kernels = _conv_kernels(model, torch.randn(4, 64, 7, 7), "cuda:sm_90")
        exact = _conv_kernels(model, torch.randn(4, 64, 7, 7), "cuda:sm_75")  # no TF32 there
    finally:
        torch.set_float32_matmul_precision(before)
    conv, fc = kernels
    assert f'input_precision="{conv_dot}"' in conv.source.source, conv.source.source
    assert f'input_precision="{mm_dot}"' in fc.source.source, fc.source.source
    assert all('input_precision="ieee"' in k.source.source for k in exact)


def _copies(ptx: str) -> collections.Counter:
    loads = re.findall(r"cp\.async\.c[ag]\.shared\.global\S* \[[^]]+\], \[[^]]+\], (0x[0-9a-f]+)", ptx)
    return collections.Counter({"cp16": loads.count("0x10"), "scalar": len(re.findall(r"ld\.global\S*\.b16 ", ptx))})


def test_sm90_tiles_are_16_byte_copies():
    import uniorch.codegen.conv_layout as layout

    torch.manual_seed(1)
    model, x = _block().to(torch.bfloat16), torch.randn(8, 64, 28, 28, dtype=torch.bfloat16)
    (nhwc,) = _conv_kernels(model, x, "cuda:sm_90")
    saved = layout.MIN_CHANNELS
    layout.MIN_CHANNELS = 10 ** 9  # the same convolution read NCHW, as before
    try:
        (nchw,) = _conv_kernels(model, x, "cuda:sm_90")
    finally:
        layout.MIN_CHANNELS = saved
    assert nhwc.specialized is not None and nchw.specialized is not None
    fast, slow = _copies(nhwc.specialized.asm["ptx"]), _copies(nchw.specialized.asm["ptx"])
    assert "wgmma" in nhwc.specialized.asm["ptx"] and "cubin" in nhwc.specialized.asm
    assert slow["cp16"] == 0 and slow["scalar"] >= 64, slow      # every element a 2-byte load
    assert fast["cp16"] >= 16, fast
    # BatchNorm's per-channel vectors (rows of the tile) are loaded once per row a thread holds:
    # Triton 3.6 loaded a [BLOCK_M, 1] tensor once per accumulator element (256 loads)
    assert fast["scalar"] <= 16, fast
    # both tiles are copied 8 bf16 (16 bytes) at a time
    copies = re.findall(r"async_copy_global_to_local .*contiguity = (\d+)", nhwc.specialized.asm["ttgir"])
    assert len(copies) >= 2 and set(copies) == {"8"}, copies


@pytest.mark.parametrize("make, shape", [
    (lambda: _block(), (2, 64, 9, 11)),
    (lambda: _block(32, 48, 1, 2), (2, 32, 9, 11)),
    (lambda: nn.Sequential(nn.ReLU(), nn.Conv2d(32, 16, 3, padding=2, dilation=2)), (2, 32, 7, 6)),
])
def test_channels_last_gpu_kernel_computes_what_eager_does(make, shape):
    """The sm_90 kernel (TF32 dots, so it reads channels-last) run on Triton's interpreter, where
    the float32 dot is exact: the plan's relayout and the window-major K give eager's numbers."""
    from uniorch.backends.triton_launch import TritonLauncher
    from uniorch.codegen import generate
    from uniorch.runtime import loader

    torch.manual_seed(2)
    model, x = make().eval().requires_grad_(False), torch.randn(shape)
    cm = uniorch.compile(model, target="interpret")
    cm(x)
    regions = [r for e in cm._cache.values() for r in e.program.regions]
    (kernel,) = [k for r in regions for k in r.plan.kernels.values() if k.source.name.endswith("contraction")]
    from torch_mlir import ir

    from uniorch.codegen.patterns import FP32_DOT

    # as a compile under torch.set_float32_matmul_precision("high") records it for sm_90
    kernel.func_op.attributes[FP32_DOT] = ir.StringAttr.get("tf32", kernel.func_op.context)
    gpu = generate(kernel.func_op, "cuda:sm_90")
    assert gpu.relayout, gpu.relayout
    kernel.source, kernel.fn = gpu, TritonLauncher(gpu, loader.load(gpu, interpret=True))
    x2 = torch.randn(shape)
    ref = copy.deepcopy(model).double()(x2.double())
    torch.testing.assert_close(cm(x2).double(), ref, rtol=0, atol=1e-4)


class _Basic(nn.Module):
    """Two ResNet basic blocks: each convolution's input is the previous kernel's output, and the
    first block's output is also the second's residual."""

    def __init__(self, c=32):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(c, c, 3, padding=1, bias=False) for _ in range(4))
        self.bns = nn.ModuleList(_bn(c) for _ in range(4))

    def forward(self, x):
        for b in range(2):
            h = torch.relu(self.bns[2 * b](self.convs[2 * b](x)))
            x = torch.relu(self.bns[2 * b + 1](self.convs[2 * b + 1](h)) + x)
        return x


def test_producers_write_what_the_next_convolution_reads_channels_last():
    """The plan has each convolution's output written channels-last when the convolutions reading
    it want it so (runtime/plan.py `_write_relaid`): only the model's own input is copied. Run with
    the sm_90 kernels on Triton's interpreter, as in the test above."""
    from torch_mlir import ir

    from uniorch.backends.triton_launch import TritonLauncher
    from uniorch.codegen import generate
    from uniorch.codegen.patterns import FP32_DOT
    from uniorch.runtime import loader
    from uniorch.runtime.plan import build_plan

    torch.manual_seed(4)
    model, x = _Basic().eval().requires_grad_(False), torch.randn(2, 32, 6, 7)
    cm = uniorch.compile(model, target="interpret")
    cm(x)
    (region,) = [r for e in cm._cache.values() for r in e.program.regions]
    kernels = region.plan.kernels
    assert len(kernels) == 4
    for k in kernels.values():
        k.func_op.attributes[FP32_DOT] = ir.StringAttr.get("tf32", k.func_op.context)
        k.source = generate(k.func_op, "cuda:sm_90")
        assert [list(o) for _, o in k.source.relayout] == [[0, 2, 3, 1], [0, 2, 3, 1]]  # input, filters
        k.fn = TritonLauncher(k.source, loader.load(k.source, interpret=True))
    (main,) = [op for op in region.module.body.operations
               if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == "main"]
    region.plan = build_plan(region.module, main, kernels, region.plan.launch)
    # every convolution but the first reads its input as the kernel before it wrote it
    assert sorted(region.plan.laid_out) == sorted(kernels)[1:] and all(v == {0} or 0 in v for v in region.plan.laid_out.values())
    seen = []
    for k in kernels.values():
        real = k.fn

        def spy(inputs, outputs, sizes=None, real=real):
            seen.append([t.stride() for t in inputs])
            return real(inputs, outputs)

        k.fn = spy
    x2 = torch.randn(2, 32, 6, 7)
    ref = copy.deepcopy(model).double()(x2.double())
    torch.testing.assert_close(cm(x2).double(), ref, rtol=0, atol=1e-4)
    # channels innermost for every kernel's input (copied for the first, written so for the rest)
    assert all(strides[0][1] == 1 for strides in seen), seen


def _weight_grad(x, dy, w):
    return torch.ops.aten.convolution_backward(dy, x, w, [0], [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                               [False, True, False])[1]


@pytest.mark.parametrize("cin", [64, 32])  # 32: an N tile of 64 spans two window positions
def test_exact_fp32_weight_gradient_reads_x_channels_last(cin, exact_convs):
    """An fp32 weight gradient on FMA units (conv_layout.fma_channels_innermost): x laid out
    channels-last, N enumerated window-major with the input channel innermost, the window position
    one scalar per N tile and K tiles of 16 (no spills for sm_90 with Triton 3.6's ptxas). Run on
    Triton's interpreter with the plan's relayout, it computes eager's gradient."""
    from uniorch.backends.triton_launch import TritonLauncher
    from uniorch.codegen import generate
    from uniorch.runtime import loader

    torch.manual_seed(3)
    args = (torch.randn(2, cin, 9, 7), torch.randn(2, 16, 9, 7), torch.randn(16, cin, 3, 3))
    cm = uniorch.compile(_weight_grad, target="interpret", fallback="error")
    cm(*args)
    regions = [r for e in cm._cache.values() for r in e.program.regions]
    (kernel,) = [k for r in regions for k in r.plan.kernels.values() if k.source.name.endswith("contraction")]
    gpu = generate(kernel.func_op, "cuda:sm_90")
    assert [list(o) for _, o in gpu.relayout] == [[0, 2, 3, 1]], gpu.relayout
    assert ("pid_n * BLOCK_N // 64" in gpu.source) == (cin == 64), gpu.source
    # the tiles come from the schedule recorded for the target (here the interpreter's): for sm_90
    (aot,) = [k for k in compile_aot(_weight_grad, args, target="cuda:sm_90").kernels if k.kind == "contraction"]
    assert aot.source.constexprs["BLOCK_K"] == 16 and [list(o) for _, o in aot.source.relayout] == [[0, 2, 3, 1]]
    own = generate(kernel.func_op, "interpret")
    assert own.relayout == []  # the interpreter's own kernel keeps NCHW
    kernel.source, kernel.fn = gpu, TritonLauncher(gpu, loader.load(gpu, interpret=True))
    args2 = tuple(torch.randn_like(a) for a in args)
    ref = _weight_grad(*(a.double() for a in args2))
    torch.testing.assert_close(cm(*args2).double(), ref, rtol=0, atol=1e-4)


@pytest.mark.parametrize("shape", [(32, 64, 7, 7), (16, 32, 3, 3)])
def test_small_forward_convolutions_keep_their_fp32_layout(shape, exact_convs):
    """A forward convolution over a small image has the weight gradient's shape with the roles
    swapped (batch plain in x, output pixels summed with taps): it keeps NCHW."""
    x = torch.randn(shape)
    (kernel,) = _conv_kernels(nn.Conv2d(shape[1], 64, 3, padding=1, bias=False), x, "cuda:sm_90")
    assert kernel.source.relayout == [] and "pid_n * BLOCK_N //" not in kernel.source.source


@pytest.mark.parametrize("k", [1, 3])
def test_bytes_count_the_copies_the_plan_makes(k):
    """explain's bytes add a relayout copy (read and written) only where the plan makes one: a 3x3
    convolution's filters are copied channels-last each call, a 1x1 convolution's [out, in, 1, 1]
    filters already are (the plan passes them as they are). The input, the graph's own NCHW
    tensor, is copied in both."""
    from uniorch.api import explain_static

    conv = nn.Conv2d(64, 64, k, padding=k // 2, bias=False).eval().requires_grad_(False).to(torch.bfloat16)
    x = torch.randn(4, 64, 14, 14, dtype=torch.bfloat16)
    rep = explain_static(conv, (x,), target="cuda:sm_90")
    (kern,) = rep.kernels
    nbytes = lambda t: t.numel() * t.element_size()  # noqa: E731
    copies = nbytes(x) + (nbytes(conv.weight) if k > 1 else 0)
    assert kern.bytes_read == nbytes(x) + nbytes(conv.weight) + copies, (kern.bytes_read, copies)
    assert kern.bytes_written == nbytes(x) + copies
