"""The cpu backend: uniorch's kernels through Ascend's triton-adapter-opt, lowered to LLVM with
upstream MLIR (torch-mlir's bindings), JIT-compiled and run in process. Every result is compared
with eager PyTorch on fresh random inputs; a kernel must run natively (a fallback to the
interpreter fails these tests unless the test is about the fallback)."""
from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import uniorch
from uniorch.backends import get_backend
from uniorch.backends.cpu import CpuFallbackWarning
from uniorch.backends.driver import compile_kernel, stage_names

from adapter_util import needs_adapter
from conftest import REPO

pytestmark = needs_adapter


def _native(fn, *args):
    """`fn` compiled for cpu and called on `args`, with every kernel native (no interpreter). Read
    from the report: a fallback warning turned into an error only made that kernel's ops eager."""
    cm = uniorch.compile(fn, target="cpu")
    out = cm(*args)
    rep = cm.explain()
    assert rep.kernels and not rep.fallbacks and not any(k.note for k in rep.kernels), str(rep)
    return out


def _close(got, want, tol=1e-5):
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_stages_and_the_llvm_it_lowers_to():
    cpu = get_backend("cpu")
    assert stage_names(cpu) == ["triton", "ttir", "ttadapter", "llmlir"]
    from uniorch.codegen import generate
    from uniorch.ir import to_mlir
    from uniorch.runtime.compiler import kernel_functions, to_kernel_stage
    from uniorch.targets import parse_target

    t = parse_target("cpu")
    module = to_mlir(lambda x: torch.softmax(x, -1), (torch.randn(6, 40),))
    to_kernel_stage(module, "scheduled", t)
    (op,) = kernel_functions(module)
    ck = compile_kernel(generate(op, "cpu"), cpu, use_cache=False)
    fn = ck.source.fn_name
    assert '"func.func"' in ck.asm["ttadapter"] and 'mix_mode = "aiv"' in ck.asm["ttadapter"]  # generic form
    from test_cann_backend import _filecheck

    _filecheck(ck.asm["llmlir"], f"""
CHECK: llvm.func @{fn}(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: i64, %arg3: i64, %arg4: i64,
CHECK-NOT: memref.
CHECK: llvm.intr.exp
CHECK: llvm.func @{fn}__grid(
CHECK: llvm.call @{fn}(
CHECK-NOT: memrefCopy
""")


@pytest.mark.parametrize("case", ["softmax", "layernorm", "matmul_gelu", "neg_rowmax", "maxpool_padded",
                                  "argmax", "bmm", "where_int"])
def test_kernels_match_eager(case):
    g = torch.Generator().manual_seed(hash(case) % 1000)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    cases = {
        "softmax": (lambda x: torch.softmax(x * 3, -1), (r(37, 100),)),
        "layernorm": (lambda x, w, b: F.layer_norm(x, (64,), w, b), (r(5, 7, 64), r(64), r(64))),
        "matmul_gelu": (lambda a, b, c: F.gelu(a @ b + c), (r(33, 48), r(48, 20), r(20))),
        # a max of negative numbers: the reduction the adapter leaves without an initial value
        "neg_rowmax": (lambda x: (-(x.abs()) - 1).amax(-1), (r(19, 30),)),
        "maxpool_padded": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True), (r(2, 3, 10, 10),)),
        "argmax": (lambda x: x.argmax(-1), (r(9, 50),)),
        "bmm": (lambda a, b: torch.bmm(a, b).relu(), (r(3, 17, 24), r(3, 24, 9))),
        "where_int": (lambda x, i: torch.where(x > 0, i * 3, i - 7), (r(40, 8), torch.randint(-50, 50, (40, 8), generator=g))),
    }
    fn, args = cases[case]
    _close(_native(fn, *args), fn(*args))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inverse_trigonometric_and_erfc_run_natively(dtype):
    # codegen calls the vendor math library for these (libdevice.atan2, ...), which the adapter
    # passes through as tt.extern_elementwise: the lowering makes them math ops, then libm calls
    # (every kernel with one ran on the interpreter)
    g = torch.Generator().manual_seed(7)
    a, b = torch.rand(9, 40, generator=g, dtype=dtype) * 1.8 - 0.9, torch.randn(9, 40, generator=g, dtype=dtype)

    def fn(a, b):
        return (torch.atan2(a, b) + torch.atan(b) + torch.acos(a) * torch.asin(a) + torch.erfc(b)
                + torch.asinh(b) + torch.atanh(a) + torch.acosh(b.abs() + 1))

    _close(_native(fn, a, b), fn(a, b), tol=1e-5 if dtype == torch.float32 else 1e-12)


def test_bf16_conversions_need_no_runtime_library():
    # without AVX512-BF16, LLVM lowers an f32 -> bf16 truncation to a call of compiler-rt's
    # __truncsfbf2, which the JIT cannot resolve (every bf16 kernel ran on the interpreter on an
    # AVX2 machine): the lowering rounds to nearest even in integer ops itself, and carries bf16
    # values as i16 (an AVX-512 Xeon without BF16 still legalized bf16 loads and stores that way)
    cpu = get_backend("cpu")
    from uniorch.codegen import generate
    from uniorch.ir import to_mlir
    from uniorch.runtime.compiler import kernel_functions, to_kernel_stage
    from uniorch.targets import parse_target

    module = to_mlir(lambda x: (x.float() * 3).bfloat16(), (torch.randn(6, 40).bfloat16(),))
    to_kernel_stage(module, "scheduled", parse_target("cpu"))
    (op,) = kernel_functions(module)
    ck = compile_kernel(generate(op, "cpu"), cpu, use_cache=False)
    from test_cann_backend import _filecheck

    _filecheck(ck.asm["llmlir"], """
CHECK: llvm.load {{.*}} -> i16
CHECK: llvm.zext {{.*}} : i16 to i32
CHECK: llvm.lshr
CHECK: llvm.trunc {{.*}} : i32 to i16
CHECK: llvm.store {{.*}} : i16, !llvm.ptr
CHECK-NOT: bf16
""")
    assert "bf16" not in ck.asm["llmlir"]
    x = torch.randn(6, 40).bfloat16()
    # 3 * (1 + 2^-7) and 3 * (1 + 3 * 2^-7) fall halfway between two bf16 values: one rounds up, one down
    x[0, :4] = torch.tensor([float("inf"), -float("inf"), 1 + 2 ** -7, -(1 + 3 * 2 ** -7)])
    assert (x[0, 2:4].float() * 3).bfloat16().float().tolist() == [3 + 4 * 2 ** -7, -(3 + 8 * 2 ** -7)]
    got = _native(lambda t: (t.float() * 3).bfloat16(), x)
    assert torch.equal(got.view(torch.int16), (x.float() * 3).bfloat16().view(torch.int16))


def test_bf16_constants_as_eager():
    """bf16 constants (fills, a -inf mask, NaN) stored natively, bit for bit, carried as i16."""
    from uniorch.backends.cpu.bf16_storage import bf16_as_i16

    assert bf16_as_i16("llvm.mlir.constant(-1.500000e+00 : bf16) : bf16") == "llvm.mlir.constant(-16448 : i16) : i16"
    assert bf16_as_i16("llvm.mlir.constant(0xFF80 : bf16) : bf16") == "llvm.mlir.constant(-128 : i16) : i16"

    def fn(x):
        return (torch.where(x > 0, x, float("-inf")), x.masked_fill(x < -1, 2.5), torch.full_like(x, float("nan")),
                x.clamp(min=-0.75))

    x = torch.randn(5, 24).bfloat16()
    for got, want in zip(_native(fn, x), fn(x)):
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("src", [torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool])
def test_integer_to_bf16_casts_run_natively(src):
    """int -> bf16 (gpt-fast's int8 weight-only linear: `weight.to(x.dtype)`) was an `llvm.sitofp`
    to bf16, which the i16 carrying of bf16 made invalid: every such kernel fell back to PyTorch."""
    x = torch.randint(-100 if src not in (torch.uint8, torch.bool) else 0, 2 if src == torch.bool else 100,
                      (7, 24)).to(src)
    fn = lambda x: x.to(torch.bfloat16) * 1.5  # noqa: E731
    got = _native(fn, x)
    assert torch.equal(got.view(torch.int16), fn(x).view(torch.int16))


@pytest.mark.parametrize("m,k,n", [(1, 12, 16), (1, 33, 20), (3, 12, 16)])
def test_bf16_matmuls_with_a_single_row_match_eager(m, k, n):
    # a bf16 dot of a broadcast row came out ~1e10 through the adapter's lowering: the cpu target
    # widens bf16 dot operands to f32 (exact: bf16 products are exact in f32)
    gen = torch.Generator().manual_seed(m * k + n)
    a, b = torch.randn(m, k, generator=gen).bfloat16(), torch.randn(k, n, generator=gen).bfloat16()
    _close(_native(lambda x, y: torch.mm(x, y).float(), a, b), torch.mm(a, b).float(), tol=1e-2)


def _rms(t):
    return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)


@pytest.mark.parametrize("case", ["row_residual", "row_residual_rmsnorm", "column"])
def test_contractions_of_a_single_row_or_column_run_natively(case):
    # a decode step's projections have one row (M = 1): their stores stepped by 0 along M, which
    # Ascend's adapter rejects ("strides must not be zero") where no mask along N hides it, and
    # each ran on the interpreter (N a multiple of the tile here)
    g = torch.Generator().manual_seed(len(case))
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    fn, args = {
        "row_residual": (lambda x, w, res: F.linear(x, w) + res, (r(1, 1, 32), r(32, 32), r(1, 1, 32))),
        "row_residual_rmsnorm": (lambda x, w, res: _rms(F.linear(x, w) + res), (r(1, 1, 32), r(32, 32), r(1, 1, 32))),
        "column": (lambda x, w, b: torch.tanh(x @ w + b), (r(32, 48), r(48, 1), r(1))),
    }[case]
    _close(_native(fn, *args), fn(*args), 1e-4)


@pytest.mark.parametrize("case", ["softmax", "amax", "attention_over_one_key"])
def test_max_reductions_over_one_element_run_natively(case):
    # the adapter's max reduction has no initial value; the lowering seeds it with the first element,
    # and over one element (a decoder's first step attends to one key) refused it: interpreter
    g = torch.Generator().manual_seed(len(case))
    fn, args = {
        "softmax": (lambda t: t.softmax(-1), (torch.randn(16, 1, generator=g),)),
        "amax": (lambda t: t.amax(1) * 2, (torch.randn(16, 1, generator=g),)),
        "attention_over_one_key": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                                   (torch.randn(2, 4, 3, 8, generator=g), torch.randn(2, 4, 1, 8, generator=g),
                                    torch.randn(2, 4, 1, 8, generator=g))),
    }[case]
    _close(_native(fn, *args), fn(*args), 1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lgamma_and_nextafter_run_natively_as_eager(dtype):
    """libdevice's lgamma and nextafter were extern calls no MLIR here parses (the kernel ran on
    Triton's interpreter); they are calls of libm's, which ATen's CPU kernels call too: poles,
    negative non-integers, huge arguments, NaN and infinities as eager."""
    gen = torch.Generator().manual_seed(8)
    x = torch.cat([torch.randn(40, generator=gen, dtype=dtype) * 6, torch.rand(20, generator=gen, dtype=dtype) * 1e30,
                   torch.tensor([0.0, -0.0, -1.0, -2.0, -2.5, 1.0, 2.0, 0.5, float("inf"), -float("inf"), float("nan")],
                                dtype=dtype)])
    y = torch.randn(x.shape, generator=gen, dtype=dtype)
    y[:5] = x[:5]  # toward itself: unchanged

    def fn(x, y):
        return torch.lgamma(x), torch.nextafter(x, y), torch.nextafter(x, torch.full_like(x, float("inf")))

    got, want = _native(fn, x, y), fn(x, y)
    tol = 1e-6 if dtype == torch.float32 else 1e-14
    torch.testing.assert_close(got[0], want[0], rtol=tol, atol=tol, equal_nan=True)
    assert torch.equal(got[1].view(torch.int64 if dtype == torch.float64 else torch.int32),
                       want[1].view(torch.int64 if dtype == torch.float64 else torch.int32))
    torch.testing.assert_close(got[2], want[2], rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_hypot_and_complex_magnitudes_run_natively(dtype):
    # libdevice's hypot was an extern call the adapter's MLIR cannot parse: the kernel (any complex
    # abs, a spectrogram's magnitude) ran on the interpreter; it is math ops now, overflow-safe
    g = torch.Generator().manual_seed(9)
    big = 3e38 if dtype == torch.float32 else 1e300
    a = torch.randn(16, 40, generator=g, dtype=dtype) * torch.logspace(-20, 20, 40, dtype=dtype)
    b = torch.randn(16, 40, generator=g, dtype=dtype)
    a[0, :6] = torch.tensor([0.0, float("inf"), float("nan"), float("-inf"), -0.0, big], dtype=dtype)
    b[0, :6] = torch.tensor([0.0, float("nan"), 1.0, 2.0, 0.0, big], dtype=dtype)
    torch.testing.assert_close(_native(torch.hypot, a, b), torch.hypot(a, b), equal_nan=True)
    z = torch.complex(a[1:], b[1:])
    torch.testing.assert_close(_native(torch.abs, z), z.abs())


def test_bf16_attention_matches_eager():
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, 9, 16, generator=gen).bfloat16() for _ in range(3))
    got = _native(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v)
    _close(got.float(), F.scaled_dot_product_attention(q, k, v, is_causal=True).float(), tol=2e-2)


def test_many_programs_and_threads_match_eager():
    # large enough that the grid is split over threads (launch.PARALLEL_BYTES)
    x, y = torch.randn(1024, 512), torch.randn(512)
    fn = lambda a, b: torch.tanh(a * b) + a.sum(-1, keepdim=True)  # noqa: E731
    _close(_native(fn, x, y), fn(x, y), 1e-4)


def test_scatter_add_with_repeated_indices_over_many_programs():
    # the adapter lowers atomics to plain read-modify-writes: a grid split over threads lost updates
    g = torch.Generator().manual_seed(3)
    idx, src = torch.randint(0, 5, (400000,), generator=g), torch.randn(400000, generator=g)
    fn = lambda d, i, s: d.scatter_add(0, i, s)  # noqa: E731
    _close(_native(fn, torch.zeros(5), idx, src), fn(torch.zeros(5), idx, src), 1e-4)


def test_kernel_it_cannot_take_runs_on_the_interpreter_and_says_why(monkeypatch):
    from uniorch.backends.cpu import fallbacks
    from uniorch.codegen import sort

    # Ascend's adapter aborts on the bitonic network unrolled, as GPUs run it (an assertion in its use
    # analysis); the cpu target's own form loops (`sort._network`), so this asks for the GPUs' form
    monkeypatch.setattr(sort, "_looped_network", lambda target: False)
    x = torch.randn(6, 40)
    cm = uniorch.compile(lambda t: torch.sort(t, -1)[0], target="cpu")
    with pytest.warns(CpuFallbackWarning, match=r"kernel k\d+_sort runs on Triton's interpreter: .*"
                                                 r"triton-adapter-opt rejected kernel k\d+_sort"):
        rep = cm.explain(x)
    _close(cm(x), torch.sort(x, -1)[0])
    assert any("rejected kernel" in why for name, why in fallbacks().items() if name.endswith("_sort"))
    (sort,) = [k for k in rep.kernels if k.kind == "sort"]
    assert sort.note.startswith("runs on Triton's interpreter:") and "triton-adapter-opt" in sort.note
    assert f"{sort.name}: runs on Triton's interpreter" in str(rep)


@pytest.mark.parametrize("case", ["cumsum", "cumprod", "cumsum_leading", "cumsum_long_int"])
def test_scans_run_natively(case):
    # tl.cumsum / tl.cumprod become calls into Ascend's runtime; the cpu lowering defines them
    g = torch.Generator().manual_seed(7)
    fn, args = {
        "cumsum": (lambda t: torch.cumsum(t, 1), (torch.randn(4, 8, generator=g),)),
        "cumprod": (lambda t: torch.cumprod(t, -1), (torch.rand(5, 30, generator=g) + 0.5,)),
        "cumsum_leading": (lambda t: torch.cumsum(t, 0), (torch.randn(37, 3, generator=g),)),
        "cumsum_long_int": (lambda t: torch.cumsum(t, -1), (torch.randint(-9, 9, (3, 4, 300), generator=g),)),
    }[case]
    _close(_native(fn, *args), fn(*args), 1e-4)


@pytest.mark.parametrize("name", ["mlp", "transformer_block", "cnn_pools", "attention_sdpa", "hf_llama"])
def test_zoo_models_match_eager(name):
    from test_models import fresh_inputs, load, state_of

    model, args, kwargs = load(name)
    reference = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CpuFallbackWarning)
        cm = uniorch.compile(model, target="cpu")
        rep = cm.explain(*args, **kwargs)
        fargs, fkwargs = fresh_inputs(args, kwargs, torch.initial_seed() + 1)
        with torch.no_grad():
            expected = reference(*fargs, **fkwargs)
            got = cm(*fargs, **fkwargs)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(state_of(model), state_of(reference), rtol=1e-4, atol=1e-5)
    assert rep.compiled_fraction >= 0.9 and not rep.fallbacks, str(rep)


def test_aot_bundle_for_cpu_runs_from_its_llvm(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    art = uniorch.compile_aot(model, (torch.randn(3, 8),), target="cpu")
    assert art.kernels and all("llmlir" in k.asm for k in art.kernels)
    art.save(str(tmp_path / "b"))
    loaded = uniorch.load(str(tmp_path / "b"))
    x = torch.randn(3, 8)
    with torch.no_grad():
        _close(loaded(x), model(x))


def test_conformance_kit_passes_for_cpu(tmp_path):
    env = dict(os.environ, UNIORCH_CACHE_DIR=str(tmp_path / "cache"))
    # a kernel silently falling back to the interpreter would pass the kit's numerics: make it fail
    proc = subprocess.run([sys.executable, "-W", "error::uniorch.backends.cpu.CpuFallbackWarning", "-m",
                           "uniorch.testing.conformance", "--target", "cpu"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    assert "triton → ttir → ttadapter → llmlir" in out
    assert [line for line in out.splitlines() if line.startswith("cpu:") and "0 failed, 0 skipped" in line], out


_CONVMIXER_BLOCK = """
import torch, uniorch
from torch import nn

class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x

torch.manual_seed(0)
c = 768  # ConvMixer-768/32's width, as timm builds its blocks
block = nn.Sequential(Residual(nn.Sequential(nn.Conv2d(c, c, 7, padding="same", groups=c), nn.ReLU(),
                                             nn.BatchNorm2d(c))),
                      nn.Conv2d(c, c, 1), nn.ReLU(), nn.BatchNorm2d(c)).eval()
for m in block.modules():
    if isinstance(m, nn.BatchNorm2d):
        m.running_mean.normal_(0, 0.3)
        m.running_var.uniform_(0.5, 1.5)
x = torch.randn(2, c, 9, 9)
cm = uniorch.compile(block, target="cpu")
with torch.no_grad():
    got, want = cm(x), block(x)
rep = cm.explain()
assert len(rep.kernels) == 1 and not rep.fallbacks, str(rep)
torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
print("ok")
"""


def test_a_loop_of_stack_tiles_does_not_grow_the_stack(tmp_path):
    """ConvMixer's block: the 1x1 convolution computes the 7x7 depthwise one in its B tiles, 49 taps
    in each of 48 K steps, each tap's tiles on the stack. Every iteration took new stack (LLVM's
    alloca in a loop) until the 8 MiB of a thread overflowed: a segfault, so it runs apart."""
    env = dict(os.environ, UNIORCH_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", _CONVMIXER_BLOCK], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (proc.returncode, proc.stderr[-3000:])


def test_a_kernel_frame_keeps_its_stack_tiles_under_the_budget():
    """Stack tiles a function allocates outside loops are all live in its frame: past FRAME_BUDGET
    the largest move to the heap (a bitonic sort of 8192 elements held 91 steps' 96 KiB tiles, 8.7
    MB, and crashed the process with SIGSEGV)."""
    from torch_mlir import ir

    from uniorch.backends.cpu.lowering import FRAME_BUDGET, _bound_frame

    n = FRAME_BUDGET // (16 << 10) + 8  # 16 KiB tiles, 8 more than the budget holds
    tile = "memref<4096xf32>"
    body = "".join(f"    %a{i} = memref.alloca() : {tile}\n    memref.store %c, %a{i}[%i] : {tile}\n" for i in range(n))
    text = ("func.func @k(%c: f32, %i: index) {\n" + body + "    %s = memref.alloca() : memref<16xi64>\n"
            f"    scf.for %j = %i to %i step %i {{\n      %t = memref.alloca() : {tile}\n    }}\n    return\n}}\n")
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        _bound_frame(module)
        out = str(module)
    # the 8 tiles past the budget and a ninth for the 128-byte one, largest first: 16 KiB each
    assert out.count("memref.alloc()") == 9, out
    assert out.count("memref.alloca()") == n - 9 + 2  # the small one and the loop's (scoped per iteration) stay


def test_long_rows_sort_on_the_cpu_target():
    """A bitonic sort of 8192 lanes is 91 compare-exchange steps: unrolled, its tiles overflowed the
    stack (SIGSEGV) until `_bound_frame`, and LLVM took 142 s over its 6 MB of IR (OpInfo's sort
    sample is 8000 long). On the cpu target the network loops over its stages, each lane reading
    its partner with `tl.gather` (`runtime_calls._gather`): 8000 and 65536 lanes sort as eager
    does, NaN and ties included, with no kernel left to the interpreter. Run in a child process,
    so a crash fails this test rather than the run."""
    code = ("import torch, uniorch\ntorch.manual_seed(0)\n"
            "f = lambda x: torch.sort(x, descending=True, stable=True)\n"
            "for n in (8000, 65536):\n"
            "    x = torch.randn(n); x[::9] = float('nan'); x[1::7] = 0.25\n"
            "    with __import__('warnings').catch_warnings(record=True) as w:\n"
            "        __import__('warnings').simplefilter('always')\n"
            "        cm = uniorch.compile(f, target='cpu'); g, r = cm(x), f(x)\n"
            "    assert not cm.explain(x).fallbacks\n"
            "    assert torch.equal(g[0].nan_to_num(), r[0].nan_to_num()) and torch.equal(g[1], r[1])\n"
            "    assert not [m for m in w if issubclass(m.category, uniorch.backends.cpu.CpuFallbackWarning)], w\n"
            "print('ok')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), (run.returncode, run.stderr[-2000:])
