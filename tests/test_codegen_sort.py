"""Sort kernels (uniorch/codegen/sort.py): aten.sort / argsort / msort / topk lower to
`tm_tensor.sort` (topk: sort + slice), kthvalue to `tm_tensor.topk`; uniorch-fuse makes each a
"sort" kernel of its own. Run in Triton's interpreter against eager PyTorch on fresh inputs.

Values must equal eager's exactly. Eager's sort is not stable, so indices are checked as what they
must be: a permutation of the row that gathers the input into the sorted values; ours are stable
(ties keep input order), which is checked too."""
import pytest
import torch

import uniorch
from kernel_util import capture, groups, outline

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _special(shape, dtype=torch.float32):
    """Ties, signed zeros, infinities and NaNs (NaN sorts last ascending, first descending)."""
    x = torch.randn(shape).round()
    x.view(-1)[::7] = 0.0
    x.view(-1)[3::11] = -0.0
    x.view(-1)[1::13] = float("inf")
    x.view(-1)[5::17] = float("-inf")
    x.view(-1)[2::19] = float("nan")
    return x.to(dtype)


CASES = {
    "sort_last": (lambda x: torch.sort(x, -1), lambda: (torch.randn(4, 33),)),
    "sort_desc_dim0": (lambda x: torch.sort(x, 0, descending=True), lambda: (torch.randn(9, 5),)),
    "sort_middle_f64": (lambda x: torch.sort(x, 1), lambda: (torch.randn(2, 9, 3).double(),)),
    "special": (lambda x: torch.sort(x, -1), lambda: (_special((3, 40)),)),
    "special_desc": (lambda x: torch.sort(x, -1, descending=True), lambda: (_special((3, 40)),)),
    "special_f16": (lambda x: torch.sort(x, -1), lambda: (_special((2, 30), torch.float16),)),
    "special_bf16_desc": (lambda x: torch.sort(x, -1, descending=True), lambda: (_special((2, 30), torch.bfloat16),)),
    "int32_ties": (lambda x: torch.sort(x, -1), lambda: (torch.randint(-3, 3, (3, 17), dtype=torch.int32),)),
    "int64_desc_extremes": (lambda x: torch.sort(x, -1, descending=True),
                            lambda: (torch.tensor([[2**63 - 1, -2**63, 0, 5, -2**63, 2**63 - 1, 1]]),)),
    "int8": (lambda x: torch.sort(x, 0), lambda: (torch.randint(-128, 127, (21, 2), dtype=torch.int8),)),
    "argsort": (lambda x: torch.argsort(x, -1, descending=True), lambda: (torch.randn(5, 12),)),
    "msort": (lambda x: torch.msort(x), lambda: (torch.randn(6, 4),)),
    "topk": (lambda x: torch.topk(x, 5, -1), lambda: (torch.randn(4, 64),)),
    "topk_smallest_dim0": (lambda x: torch.topk(x, 2, 0, largest=False), lambda: (torch.randn(7, 3),)),
    "two_element_rows": (lambda x: torch.sort(x, -1), lambda: (torch.randn(3, 2),)),
}


def _check(x, dim, out, ref):
    """Values exactly eager's; indices gather them from the input, stably."""
    if not isinstance(ref, tuple):  # argsort (indices) or msort (values)
        out, ref = ((None, out), (None, ref)) if ref.dtype == torch.int64 else ((out, None), (ref, None))
    vals, idx = out
    rvals, ridx = ref
    if idx is None:
        assert torch.equal(torch.nan_to_num(vals), torch.nan_to_num(rvals))
        return
    assert idx.dtype == ridx.dtype and idx.shape == ridx.shape
    if vals is not None:
        assert vals.dtype == rvals.dtype and torch.equal(vals.isnan(), rvals.isnan())
        assert torch.equal(torch.nan_to_num(vals), torch.nan_to_num(rvals)), (vals, rvals)
    gathered = torch.gather(x, dim, idx)
    expect = rvals if rvals is not None else torch.gather(x, dim, ridx)
    assert torch.equal(torch.nan_to_num(gathered), torch.nan_to_num(expect))
    if idx.shape[dim] == x.shape[dim]:  # a full sort: a permutation of each row
        assert torch.equal(idx.sort(dim).values, ridx.sort(dim).values)
    # stable: within a run of equal values, indices increase
    same = (gathered.narrow(dim, 1, idx.shape[dim] - 1) == gathered.narrow(dim, 0, idx.shape[dim] - 1))
    same |= gathered.narrow(dim, 1, idx.shape[dim] - 1).isnan() & gathered.narrow(dim, 0, idx.shape[dim] - 1).isnan()
    step = idx.narrow(dim, 1, idx.shape[dim] - 1) - idx.narrow(dim, 0, idx.shape[dim] - 1)
    assert bool((step[same] > 0).all())


@pytest.mark.parametrize("case", sorted(CASES))
def test_sorts_compile_to_sort_kernels(case):
    fn, make = CASES[case]
    rep = uniorch.explain(fn, *make(), target="interpret")
    assert not rep.fallbacks, rep
    assert [k.kind for k in rep.kernels] == ["sort"]
    cm = uniorch.compile(fn, target="interpret")
    (x,) = make()  # fresh values
    out, ref = cm(x), fn(x)
    dim = {"sort_desc_dim0": 0, "sort_middle_f64": 1, "int8": 0, "msort": 0, "topk_smallest_dim0": 0}.get(case, -1)
    if isinstance(ref, tuple):
        out, ref = tuple(out), tuple(ref)
    _check(x, dim % x.dim(), out, ref)


def test_kthvalue_is_topk_then_a_reduction():
    fn = lambda x: torch.kthvalue(x, 3, -1)  # noqa: E731
    x = torch.randn(4, 10)
    rep = uniorch.explain(fn, x, target="interpret")
    assert not rep.fallbacks, rep
    assert "sort" in [k.kind for k in rep.kernels]
    x = torch.randn(4, 10)
    out, ref = uniorch.compile(fn, target="interpret")(x), fn(x)
    assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1])


def test_sort_feeds_and_reads_pointwise_kernels():
    fn = lambda x: torch.sort(x + 1, -1)[0] * 2  # noqa: E731
    x = torch.randn(3, 7)
    rep = uniorch.explain(fn, x, target="interpret")
    assert [k.kind for k in rep.kernels] == ["pointwise", "sort", "pointwise"]
    assert torch.equal(uniorch.compile(fn, target="interpret")(x), fn(x))


def test_rows_longer_than_a_block_run_eagerly():
    fn = lambda x: torch.sort(x, -1)  # noqa: E731
    x = torch.randn(1, 70000)  # past the interpreter's one block (INTERP_ROW_MAX)
    rep = uniorch.explain(fn, x, target="interpret")
    assert rep.fallbacks and "longer than one block" in str(rep.fallbacks), rep
    out = uniorch.compile(fn, target="interpret")(x)
    assert torch.equal(out[0], fn(x)[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_long_rows_sort_in_one_interpreter_block(dtype):
    """Rows past a GPU block (8000 > 4096 for 64-bit keys) sort in one block in the interpreter,
    stably, with NaNs last; a GPU target still refuses them (registers)."""
    from uniorch.codegen.sort import choose_schedule
    from uniorch.codegen.source import CodegenError

    fn = lambda x: torch.sort(x, -1, descending=True)  # noqa: E731
    x = _special((2, 8000), dtype)
    rep = uniorch.explain(fn, x, target="interpret")
    assert not rep.fallbacks, rep
    out = uniorch.compile(fn, target="interpret")(x)
    _check(x, 1, tuple(out), tuple(fn(x)))
    module = capture(fn, (x,))
    (ops,) = groups(module).values()
    kernel, _, _ = outline(module, ops, kind="sort")
    with kernel.context:
        assert choose_schedule(kernel, "interpret")["block_r"] == 8192
        if dtype == torch.float64:  # 64-bit keys: a GPU block holds 4096
            with pytest.raises(CodegenError, match="longer than one block"):
                choose_schedule(kernel, "cuda:sm_90")


@pytest.mark.parametrize("network", ["interpret", "cpu"])
@pytest.mark.parametrize("block_p", [1, 4])
def test_bitonic_network_on_forced_blocks(block_p, network):
    """More rows than one program holds, padding lanes past a row of 45 in a block of 64; the
    network unrolled (GPUs, the interpreter) and looped with gathers (the cpu target's form), both
    run on the interpreter."""
    from uniorch.codegen.sort import generate_sort
    from uniorch.runtime import loader

    fn = lambda x: torch.sort(x, -1)  # noqa: E731
    x = torch.randn(7, 45)
    module = capture(fn, (x,))
    gs = groups(module)
    assert len(gs) == 1
    kernel, inputs, results = outline(module, gs[0], kind="sort")
    with kernel.context:
        ks = generate_sort(kernel, network, {"block_p": block_p, "block_r": 64, "num_warps": 1})
    assert ks.grid == (-(-7 // block_p),)
    # 21 steps for 64 lanes: written out, or one step in two loops
    assert ks.source.count("= _exchange(key, idx") == (0 if network == "cpu" else 21)
    assert ks.source.count("tl.gather(") == (2 if network == "cpu" else 0)
    vals, idx = torch.empty(7, 45), torch.empty(7, 45, dtype=torch.int64)
    loader.launch(ks, loader.load(ks, interpret=True), [x], [vals, idx])
    ref = fn(x)
    # (torch.sort is not stable: fresh values that tie may come in either order there)
    _check(x, -1, (vals, idx), ref)


@pytest.mark.parametrize("target", [("cuda", 90, 32), ("hip", "gfx942", 64)])
def test_sort_kernel_compiles_for_gpus(target):
    """The reshapes and reductions of the network must lower through Triton's GPU pipeline too."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget

    from uniorch.codegen.sort import generate_sort
    from uniorch.runtime import loader

    module = capture(lambda x: torch.topk(x, 4, -1), (torch.randn(8, 100),))
    (ops,) = groups(module).values()
    kernel, _, _ = outline(module, ops, kind="sort")
    name = "cuda:sm_90" if target[0] == "cuda" else "rocm:gfx942"
    with kernel.context:
        ks = generate_sort(kernel, name)
        from uniorch.codegen import pointer_types

        ks.pointer_types = pointer_types(kernel)
    jit_fn = loader.load(ks, interpret=False)
    src = triton.compiler.ASTSource(jit_fn, signature=ks.signature(), constexprs=ks.constexprs)
    compiled = triton.compile(src, target=GPUTarget(*target), options={"num_warps": ks.num_warps})
    assert "tt.reshape" in compiled.asm["ttir"]
