"""Generic Triton codegen (pointwise / reduction / copy kernels), run in Triton's interpreter
against eager PyTorch on fresh random inputs. Each case captures a small torch function, fuses it
into one group, outlines the group as a kernel function and launches the generated source."""

import re

import pytest
import torch
import torch.nn.functional as F

from kernel_util import capture, groups, main_of, outline, run_kernel, run_module

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _check(fn, args, schedule=None, rtol=1e-4, atol=1e-5, expect_groups=1):
    """Fuses `fn`, runs every group as a generated kernel, compares with eager on the same inputs.
    Returns the KernelSource of the (last) group."""
    module = capture(fn, args)
    n = len(groups(module))
    if expect_groups is not None:
        assert n == expect_groups, f"expected {expect_groups} group(s), got {n}:\n{module}"
    outs, sources = run_module(module, args, schedule)
    ref = fn(*args)
    ref = ref if isinstance(ref, tuple) else (ref,)
    # outputs after the model's are run-time checks (capture/checks.py: a zero integer divisor);
    # on these inputs every one must hold
    assert len(outs) >= len(ref)
    assert all(o.dtype == torch.bool and bool(o.all()) for o in outs[len(ref):]), outs[len(ref):]
    outs = outs[:len(ref)]
    for o, r in zip(outs, ref):
        assert o.shape == r.shape and o.dtype == r.dtype, (o.shape, r.shape, o.dtype, r.dtype)
        if r.dtype.is_floating_point:
            torch.testing.assert_close(o, r, rtol=rtol, atol=atol, equal_nan=True)
        else:
            assert torch.equal(o, r), f"{o}\n!=\n{r}"
    return sources[max(sources)]


LOOPED = {"block_p": 2, "block_r": 16, "looped": True, "num_warps": 4}


# -- pointwise ------------------------------------------------------------------------------------
def test_pointwise_broadcast():
    ks = _check(lambda x, y, z: torch.relu(x * y[None, :] + z[:, None]) - torch.tanh(x),
                (torch.randn(5, 7), torch.randn(7), torch.randn(5)))
    assert "tl.reduce" not in ks.source and "def k0_pointwise(" in ks.source


def test_pointwise_size_one_dims_and_scalars():
    _check(lambda x, y: (x + y) * 0.5 - x.mean(), (torch.randn(3, 1, 4), torch.randn(1, 5, 1)), expect_groups=2)


def test_transpose_folded_into_indexing():
    ks = _check(lambda x, y: torch.relu(x.t() * 2.0 + y), (torch.randn(8, 12), torch.randn(12, 8)))
    assert ks.source.count("tl.load(") == 2  # the transpose is an index expression, not a copy


def test_permute_3d_then_add():
    _check(lambda x, y: x.permute(2, 0, 1) + y, (torch.randn(3, 4, 5), torch.randn(5, 3, 4)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_pointwise_dtypes(dtype):
    tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float64: 1e-12}[dtype]
    _check(lambda x, y: torch.sigmoid(x) * y + torch.exp(y) - torch.sqrt(torch.abs(x)),
           (torch.randn(6, 10, dtype=dtype), torch.randn(6, 10, dtype=dtype)), rtol=tol, atol=tol)


def test_math_table():
    def f(x, y):
        a = torch.tanh(x) + torch.erf(y) + torch.log(torch.abs(x) + 1) + torch.sin(x) * torch.cos(y)
        b = torch.pow(torch.abs(x) + 0.5, y) + torch.floor(x) + torch.ceil(y) + torch.round(x * 3)
        c = torch.rsqrt(torch.abs(y) + 1) + x ** 2 + x ** 3 + torch.clamp(x, -0.5, 0.5)
        return a, b, c, torch.nn.functional.gelu(x)
    x = torch.randn(64) * 3
    x[:4] = torch.tensor([1e-3, -1e-3, 0.05, 20.0])  # tanh's small-|x| series and saturation
    _check(f, (x, torch.randn(64)), expect_groups=None)


def test_round_half_even_and_trunc():
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 0.49999997, -2.5, 3.7, -3.7, 0.0])
    _check(lambda x: (torch.round(x), torch.trunc(x), torch.frac(x)), (x,), expect_groups=None)


MINMAX = """
func.func private @k0_minmax(%a: tensor<16xf32>, %b: tensor<16xf32>)
    -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) attributes {uniorch.kernel} {
  %e = tensor.empty() : tensor<16xf32>
  %0:4 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>,
      affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      ins(%a, %b : tensor<16xf32>, tensor<16xf32>) outs(%e, %e, %e, %e : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) {
  ^bb0(%x: f32, %y: f32, %o0: f32, %o1: f32, %o2: f32, %o3: f32):
    %1 = arith.maximumf %x, %y : f32
    %2 = arith.minimumf %x, %y : f32
    %3 = arith.maxnumf %x, %y : f32
    %4 = arith.minnumf %x, %y : f32
    linalg.yield %1, %2, %3, %4 : f32, f32, f32, f32
  } -> (tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>)
  return %0#0, %0#1, %0#2, %0#3 : tensor<16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>
}
"""


def test_nan_semantics_of_max_min():
    """maximumf/minimumf propagate NaN (torch.maximum); maxnumf/minnumf ignore it (torch.fmax).
    (torch-mlir lowers torch.maximum itself to cmpf+select, which drops NaN from the first
    operand, so this kernel is written by hand.)"""
    from uniorch.codegen.generic import generate_generic
    from uniorch.ir import make_context, parse_module
    from uniorch.runtime import loader

    module = parse_module(MINMAX, make_context())
    kernel = module.body.operations[0].operation
    x, y = torch.randn(16), torch.randn(16)
    x[1] = y[2] = x[3] = y[3] = float("nan")
    with module.context:
        ks = generate_generic(kernel, "interpret")
    outs = [torch.empty(16) for _ in range(4)]
    loader.launch(ks, loader.load(ks, interpret=True), [x, y], outs)
    for o, r in zip(outs, (torch.maximum(x, y), torch.minimum(x, y), torch.fmax(x, y), torch.fmin(x, y))):
        torch.testing.assert_close(o, r, equal_nan=True)


def test_integer_division_and_remainder():
    a = torch.randint(-50, 50, (64,))
    b = torch.randint(1, 9, (64,)) * torch.where(torch.rand(64) < 0.5, -1, 1)
    _check(lambda a, b: (torch.div(a, b, rounding_mode="trunc"), torch.div(a, b, rounding_mode="floor"),
                         torch.remainder(a, b), torch.fmod(a, b)), (a, b), expect_groups=None)


def test_float_fmod_remainder():
    a = torch.randn(64) * 10
    b = torch.randn(64).abs() + 0.5
    _check(lambda a, b: (torch.fmod(a, b), torch.remainder(a, -b)), (a, b), expect_groups=None)


def test_bool_logic_compare_select_casts():
    def f(x, y, i):
        m = (x > 0) & ~(y < 0.5) | (x == y)
        k = torch.where(m, x, y)
        return m, k, i.float() * 0.5, (x * 4).to(torch.int32), i.to(torch.int8), (i % 3 == 0) ^ m
    _check(f, (torch.randn(32), torch.randn(32), torch.randint(-300, 300, (32,))), expect_groups=None)


def test_iota_and_index():
    _check(lambda x: x + torch.arange(12, dtype=torch.float32).reshape(3, 4), (torch.randn(3, 4),))


# -- reductions -----------------------------------------------------------------------------------
@pytest.mark.parametrize("schedule", [None, LOOPED], ids=["persistent", "looped"])
def test_softmax(schedule):
    ks = _check(lambda x: torch.softmax(x, -1), (torch.randn(6, 40) * 4,), schedule=schedule)
    assert ("for r_start in range" in ks.source) == (schedule is not None)
    assert "tl.reduce(" in ks.source and "tl.sum" not in ks.source and "tl.max(" not in ks.source


@pytest.mark.parametrize("schedule", [None, LOOPED], ids=["persistent", "looped"])
def test_layernorm(schedule):
    _check(lambda x, w, b: F.layer_norm(x, (48,), w, b), (torch.randn(2, 3, 48), torch.randn(48), torch.randn(48)),
           schedule=schedule)


def test_rmsnorm():
    def f(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    _check(f, (torch.randn(5, 64), torch.randn(64)))


@pytest.mark.parametrize("dim", [0, 1, 2, (0, 2)])
@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin", "prod"])
def test_reductions_over_dims(op, dim):
    x = torch.randn(4, 6, 10)
    if op == "prod":
        x = 1 + 0.1 * x
    fn = {"sum": lambda x: x.sum(dim), "mean": lambda x: x.mean(dim), "amax": lambda x: x.amax(dim),
          "amin": lambda x: x.amin(dim), "prod": lambda x: x.prod(dim) if isinstance(dim, int) else x.prod(0).prod(1)}[op]
    _check(fn, (x,), expect_groups=None if not isinstance(dim, int) else 1)


def test_reduction_looped_over_outer_dim():
    _check(lambda x: (x * 2).sum(0), (torch.randn(50, 6),), schedule={"block_p": 4, "block_r": 8, "looped": True})


def test_max_propagates_nan():
    x = torch.randn(4, 9)
    x[1, 3] = float("nan")
    _check(lambda x: x.amax(-1), (x,))


def test_any_all_logical_reductions():
    x = torch.randn(5, 7) > 0.8
    _check(lambda x: (x.any(-1), x.all(-1)), (x,), expect_groups=None)


def test_integer_sum_and_max():
    x = torch.randint(-100, 100, (6, 11))
    _check(lambda x: (x.sum(-1), x.amax(-1)), (x,), expect_groups=None)


@pytest.mark.parametrize("schedule", [None, {"block_p": 4, "block_r": 1}], ids=["default", "small-block"])
def test_argmax_serial(schedule):
    x = torch.randint(-50, 50, (7, 13))  # integers: floats are rewritten at capture (NaN order)
    x[2, 5] = x[2, 9] = 100  # ties: the first index wins
    ks = _check(lambda x: torch.argmax(x, -1), (x,), schedule=schedule)
    assert "for ridx in range(0, 13)" in ks.source


def test_max_with_indices_over_dim0():
    x = torch.randn(9, 4)
    _check(lambda x: torch.max(x, 0), (x,))


def test_var_mean_two_phase():
    _check(lambda x: torch.var_mean(x, -1), (torch.randn(3, 30) + 5,), schedule=LOOPED, expect_groups=None)


# -- gathers, convolutions, pooling, copies ----------------------------------------------------------
def test_embedding_gather():
    table = torch.randn(20, 8)
    idx = torch.randint(0, 20, (3, 5))
    ks = _check(lambda i, t: F.embedding(i, t) * 2.0, (idx, table))
    assert "out of bounds" in ks.source


def test_index_select_gather():
    _check(lambda x, i: torch.index_select(x, 1, i) + 1, (torch.randn(4, 10), torch.randint(0, 10, (6,))))


@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_bias_relu_implicit_gemm(stride):
    x, w, b = torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3), torch.randn(4)
    ks = _check(lambda x, w, b: torch.relu(F.conv2d(x, w, b, stride=stride)), (x, w, b), rtol=1e-4, atol=1e-4)
    assert ks.constexprs["BLOCK_K"] == 32  # K = 3 * 3 * 3 in one tl.dot tile (contraction template)


def test_maxpool():
    _check(lambda x: F.max_pool2d(x, 2), (torch.randn(2, 3, 8, 8),))


def test_avgpool_with_stride():
    _check(lambda x: F.avg_pool2d(x, 3, stride=2), (torch.randn(1, 2, 9, 9),))


def _copy_kernel(fn, args, inplace=False):
    module = capture(fn, args)
    gs = groups(module)
    assert len(gs) == 1
    ops = gs[0]
    assert ops[0].name in ("tensor.pad", "tensor.concat", "tensor.insert_slice")
    kernel, inputs, results = outline(module, ops)
    return module, kernel, inputs, results


def test_pad():
    x = torch.randn(3, 5)
    fn = lambda x: F.pad(x, (1, 2, 0, 3), value=-1.5)
    module, kernel, inputs, results = _copy_kernel(fn, (x,))
    ks, outs = run_kernel(kernel, (x,), inputs, results, main_of(module))
    torch.testing.assert_close(outs[0], fn(x))


def test_concat():
    args = (torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 1))
    fn = lambda a, b, c: torch.cat([a, b, c], 1)
    module, kernel, inputs, results = _copy_kernel(fn, args)
    ks, outs = run_kernel(kernel, args, inputs, results, main_of(module))
    torch.testing.assert_close(outs[0], fn(*args))


INSERT_SLICE = """
func.func private @k0_insert(%dest: tensor<6x8xf32>, %src: tensor<2x3xf32>) -> tensor<6x8xf32>
    attributes {uniorch.kernel, uniorch.kind = "copy"} {
  %0 = tensor.insert_slice %src into %dest[1, 2] [2, 3] [2, 1] : tensor<2x3xf32> into tensor<6x8xf32>
  return %0 : tensor<6x8xf32>
}
"""


@pytest.mark.parametrize("inplace", [False, True], ids=["out-of-place", "inplace"])
def test_insert_slice(inplace):
    from torch_mlir import ir

    from uniorch.codegen.generic import choose_schedule, generate_generic
    from uniorch.ir import make_context, parse_module
    from uniorch.runtime import loader

    module = parse_module(INSERT_SLICE, make_context())
    kernel = module.body.operations[0].operation
    dest, src = torch.randn(6, 8), torch.randn(2, 3)
    expect = dest.clone()
    expect[1:5:2, 2:5] = src
    with module.context:
        if inplace:
            sched = choose_schedule(kernel, "interpret")  # records uniorch.inplace = [0]
            assert [ir.IntegerAttr(a).value for a in ir.ArrayAttr(kernel.attributes["uniorch.inplace"])] == [0]
        else:
            sched = {"block_p": 16, "num_warps": 1}  # no schedule pass: a full copy of the destination
        ks = generate_generic(kernel, "interpret", sched)
    # in place the runtime hands the kernel the destination's buffer; else a fresh one
    out = dest.clone() if inplace else torch.full((6, 8), float("nan"))
    loader.launch(ks, loader.load(ks, interpret=True), [dest, src], [out])
    torch.testing.assert_close(out, expect)
    assert ks.grid == ((1,) if inplace else (3,))  # 6 slice elements, or 48 in blocks of 16


# -- schedules, signatures, int64 addressing ------------------------------------------------------
def test_signature_and_strided_inputs():
    """Strides are runtime arguments: a transposed (non-contiguous) input works unchanged."""
    module = capture(lambda x, y: x * y + 1, (torch.randn(4, 6), torch.randn(4, 6)))
    kernel, inputs, results = outline(module, groups(module)[0])
    from uniorch.codegen.generic import generate_generic
    from uniorch.runtime import loader

    with kernel.context:
        ks = generate_generic(kernel, "interpret")
    assert ks.signature() == {"in0_ptr": "*fp32", "in0_s0": "i64", "in0_s1": "i64", "in1_ptr": "*fp32",
                              "in1_s0": "i64", "in1_s1": "i64", "out0_ptr": "*fp32", "out0_s0": "i64",
                              "out0_s1": "i64", "BLOCK": "constexpr"}
    x = torch.randn(6, 4).t()
    y = torch.randn(4, 6)
    out = torch.empty(6, 4).t()
    loader.launch(ks, loader.load(ks, interpret=True), [x, y], [out])
    torch.testing.assert_close(out, x * y + 1)


@pytest.mark.parametrize("schedule", [None, LOOPED], ids=["persistent", "looped"])
def test_int64_indexing_path(monkeypatch, schedule):
    """Kernels touching >= 2**31 elements index in int64 (forced here on a small kernel)."""
    from uniorch.codegen import generic

    monkeypatch.setattr(generic.Kernel, "max_numel", lambda self: 2 ** 31)
    ks = _check(lambda x: torch.softmax(x, 0), (torch.randn(9, 5),), schedule=schedule)
    assert "tl.program_id(0).to(tl.int64)" in ks.source


@pytest.mark.parametrize("schedule", [None, LOOPED], ids=["persistent", "looped"])
def test_full_reduction_to_a_scalar(schedule):
    _check(lambda x: (x * x).sum(), (torch.randn(5, 7),), schedule=schedule)


def test_unsupported_raises_codegen_error():
    from uniorch.codegen import CodegenError
    from uniorch.codegen.generic import generate_generic
    from uniorch.ir import make_context, parse_module

    text = """
    func.func private @k0_bad(%a: tensor<4xi32>) -> tensor<4xi32> attributes {uniorch.kernel, uniorch.kind = "pointwise"} {
      %e = tensor.empty() : tensor<4xi32>
      %0 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
          iterator_types = ["parallel"]} ins(%a : tensor<4xi32>) outs(%e : tensor<4xi32>) {
      ^bb0(%in: i32, %out: i32):
        %1 = math.ctlz %in : i32
        linalg.yield %1 : i32
      } -> tensor<4xi32>
      return %0 : tensor<4xi32>
    }"""
    module = parse_module(text, make_context())
    with module.context, pytest.raises(CodegenError, match="math.ctlz"):
        generate_generic(module.body.operations[0].operation, "interpret")


# -- real-GPU validity: the same sources compile to TTIR for sm_90 ----------------------------------
@pytest.mark.parametrize("which", ["softmax", "layernorm"])
def test_compiles_for_cuda(which):
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget

    from uniorch.runtime import loader

    fn, args = {
        "softmax": (lambda x: torch.softmax(x, -1), (torch.randn(6, 40),)),
        "layernorm": (lambda x, w, b: F.layer_norm(x, (48,), w, b), (torch.randn(2, 3, 48), torch.randn(48), torch.randn(48))),
    }[which]
    for sched in (None, LOOPED):
        module = capture(fn, args)
        kernel, inputs, results = outline(module, groups(module)[0])
        from uniorch.codegen.generic import generate_generic

        with kernel.context:
            ks = generate_generic(kernel, "cuda:sm_90", sched)
        jit_fn = loader.load(ks, interpret=False)
        src = triton.compiler.ASTSource(jit_fn, signature=ks.signature(), constexprs=ks.constexprs)
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": ks.num_warps})
        ttir = compiled.asm["ttir"]
        assert "tt.reduce" in ttir
        if sched is not None:
            assert "scf.for" in ttir


# -- dot products: reductions, not contractions (no M or N dimension for tl.dot) -----------------
@pytest.mark.parametrize("schedule", [None, LOOPED])
@pytest.mark.parametrize("case", ["dot", "batched", "half_mul_sum"])
def test_dot_products_are_reductions(case, schedule):
    from kernel_util import groups as _groups
    from torch_mlir import ir

    fn, args, tol = {
        "dot": (lambda a, b: torch.matmul(a, b), (torch.randn(37), torch.randn(37)), {}),
        "batched": (lambda a, b: (a * b).sum(-1), (torch.randn(3, 5, 41), torch.randn(3, 5, 41)), {}),
        "half_mul_sum": (lambda x, y: (x * y).sum(-1), (torch.randn(4, 33).half(), torch.randn(4, 33).half()),
                         {"rtol": 2e-3, "atol": 2e-3}),
    }[case]
    module = capture(fn, args)
    kinds = [ir.StringAttr(o.attributes["uniorch.kind"]).value
             for ops in _groups(module).values() for o in ops if "uniorch.kind" in o.attributes]
    assert kinds == ["reduction"]
    _check(fn, tuple(torch.randn_like(a) for a in args), schedule=schedule, **tol)


# -- 16-bit floats accumulate in fp32 (as PyTorch does), rounding once ------------------------
@pytest.mark.parametrize("schedule", [None, {"block_p": 2, "block_r": 1024, "looped": True, "num_warps": 4}],
                         ids=["default", "looped"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_sums_accumulate_in_fp32(dtype, schedule):
    """Ones (halves in fp16): a 16-bit running sum saturates (fp16 at 1024 when adding 0.5, bf16 at
    256), an fp32 one is exact. 65536 is too long to stay in registers, so the default schedule
    loops too; the sum of squares is a dot product (reduction of `out + x*x`)."""
    x = torch.ones(2, 65536, dtype=dtype) * (0.5 if dtype == torch.float16 else 1.0)
    src = _check(lambda x: x.sum(-1), (x,), schedule=schedule, rtol=1e-3, atol=0)
    assert "acc1_0.to(" in src.source  # rounded once, after the loop
    if schedule is not None:
        return  # the rest only checks the default schedule (the interpreter is slow)
    _check(lambda x: (x * x).sum(-1), (x[:, :8192],), schedule=schedule, rtol=1e-3, atol=0)
    y = torch.rand(2, 4096, dtype=dtype) + 0.5
    tol = {"rtol": 1e-2, "atol": 1e-2} if dtype == torch.bfloat16 else {"rtol": 1e-3, "atol": 1e-3}
    _check(lambda y: y.mean(-1), (y,), schedule=schedule, **tol)
    _check(lambda y: y.sum(), (y,), schedule=schedule, **tol, expect_groups=None)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_softmax_and_layer_norm_long_rows(dtype):
    """torch-mlir already computes these in fp32 (extf before the reductions); long rows loop."""
    x = torch.randn(2, 6000, dtype=dtype)
    tol = {"rtol": 1e-2, "atol": 1e-2} if dtype == torch.bfloat16 else {"rtol": 1e-3, "atol": 1e-3}
    _check(lambda x: torch.softmax(x, -1), (x,), **tol)
    _check(lambda x: F.layer_norm(x, (6000,)), (x,), **tol)


@pytest.mark.parametrize("shape,pad", [((2, 3, 4, 5), (1, 1, 2, 0)), ((1, 1, 4, 4, 4), (1, 1, 1, 1, 1, 1)),
                                       ((1, 2, 5), (1, 2))])
def test_circular_pad_inserts_into_a_slice_of_an_empty_tensor(shape, pad):
    """Regression: circular padding inserts the input into `extract_slice(tensor.empty)`; that
    view stayed in @main, where the launch plan has no value for an empty tensor ("uses a value
    that no step produces"). uniorch-schedule now recreates it inside the kernel as an empty."""
    import uniorch

    fn = lambda x: F.pad(x, pad, mode="circular")  # noqa: E731
    rep = uniorch.explain(fn, torch.randn(*shape), target="interpret")
    assert not rep.fallbacks, rep
    cm = uniorch.compile(fn, target="interpret")
    x = torch.randn(*shape)
    torch.testing.assert_close(cm(x), fn(x), rtol=0, atol=0)


# -- bf16 constants -------------------------------------------------------------------------------
# ties (1 + 2**-8 lies halfway between two bf16 values), inexact values, a bf16 subnormal, an fp32
# subnormal that rounds to -0.0, one near bf16's largest finite value, one that rounds up to inf
BF16_CONSTANTS = [1.0, -2.5, 0.1, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 1e-7, 3e-39, -1e-45, 65504.0,
                  3.3e38, 3.4e38, float("inf"), float("-inf"), float("nan")]


def test_bf16_constants_round_to_nearest_even_on_the_interpreter():
    """Triton's front end turns every non-zero bf16 scalar into `builder.get_bf16(value)`; Triton
    3.6's interpreter builder has no such method, so such a kernel failed at its first launch and
    ran eagerly. The value must become the bf16 torch makes of it: fp32, then nearest even."""
    from uniorch.codegen.body import literal
    from uniorch.codegen.source import KernelSource
    from uniorch.runtime import loader

    stores = [f"    tl.store(out0_ptr + {i} * out0_s0, tl.full([], {literal(c, 'bf16')}, tl.bfloat16))"
              for i, c in enumerate(BF16_CONSTANTS)]
    source = "\n".join(["import triton.language as tl", "", "", "@jit",
                        "def bf16_constants(out0_ptr, out0_s0):", *stores]) + "\n"
    ks = KernelSource("bf16_constants", "bf16_constants", source, [], [1], (1,), pointer_types=["*bf16"])
    out = torch.zeros(len(BF16_CONSTANTS), dtype=torch.bfloat16)
    loader.launch(ks, loader.load(ks, interpret=True), [], [out])
    ref = torch.tensor(BF16_CONSTANTS, dtype=torch.float32).to(torch.bfloat16)
    assert torch.isnan(out[-1]), out
    # bit for bit (a -0.0 for +0.0 or one bf16 ulp off would pass assert_close)
    assert torch.equal(out[:-1].view(torch.int16), ref[:-1].view(torch.int16)), (out, ref)


@pytest.mark.parametrize("name,fn", [
    # GELU and ELU compute in fp32 (capture/opmath.py): the added scalars keep bf16 constants
    ("gelu_silu_chain", lambda x, y: F.silu(F.gelu(x) * y) + x + 0.3),
    ("rsqrt_reciprocal", lambda x, y: torch.rsqrt(x.abs() + 1) * y + torch.reciprocal(y)),
    ("hardswish_elu", lambda x, y: F.hardswish(x) + F.elu(y, alpha=0.3) - 0.7),
    ("scaled_softmax", lambda x, y: torch.softmax(x * 0.125 + y, -1)),
])
def test_bf16_kernels_with_constants_run_compiled(name, fn):
    """bf16 kernels holding non-zero bf16 constants run as kernels (no eager fallback, on every
    Triton uniorch supports) and match eager on fresh inputs."""
    import uniorch

    def inputs():
        return (torch.randn(8, 64) * 3).bfloat16(), torch.randn(8, 64).bfloat16()

    rep = uniorch.explain(fn, *inputs(), target="interpret")
    assert not rep.fallbacks and rep.kernels, rep
    # what this tests: the kernels hold a non-zero bf16 constant
    # (filled in fp32 and converted: Triton's own bf16 constants lose digits, see body.full_expr)
    assert any(re.search(r"tl\.full\(\[\], (?!0\.0,)[^,]+, tl\.float32\)\.to\(tl\.bfloat16\)", ks.source)
               for ks in _kernel_sources(fn, inputs()))
    cm = uniorch.compile(fn, target="interpret", fallback="error")
    for _ in range(2):
        x, y = inputs()
        got, ref = cm(x, y), fn(x, y)
        assert got.dtype == ref.dtype == torch.bfloat16
        torch.testing.assert_close(got, ref, rtol=2e-2, atol=2e-2)


def _kernel_sources(fn, args):
    _, sources = run_module(capture(fn, args), args)
    return list(sources.values())


def test_unsigned_comparisons_of_booleans():
    """Ordering bools (and max over a bool dim, as argmax's backward has) is an unsigned compare of
    i1 in MLIR, where false < true; it was refused and the op ran eagerly."""
    import uniorch

    def fn(a, b):
        return a < b, a <= b, a > b, a >= b, torch.max(a, 1)

    cm = uniorch.compile(fn, target="interpret", fallback="error")
    for seed in range(2):
        g = torch.Generator().manual_seed(seed)
        a, b = torch.rand(4, 7, generator=g) > 0.5, torch.rand(4, 7, generator=g) > 0.5
        got, ref = cm(a, b), fn(a, b)
        for x, y in zip(got[:4] + tuple(got[4]), ref[:4] + tuple(ref[4])):
            assert torch.equal(x, y)
