"""Scatter kernels (uniorch/codegen/scatter.py): `tm_tensor.scatter` from index_put, index_add /
copy / fill, scatter, scatter_add, scatter_reduce, index_reduce, put, max_unpool. Each runs in
Triton's interpreter against eager PyTorch on fresh random inputs, with no eager fallback.

Overwrites with duplicate indices pick an unspecified winner in PyTorch too, so overwrite cases use
unique indices; accumulating cases use duplicates on purpose (exact up to float reassociation).
Also: regression tests for interpreter and decomposition bugs found by the OpInfo coverage tool
(embedding, max_pool, bucketize, adaptive_max_pool3d), and GPU cross-compiles of the kernels."""
import pytest
import torch

import uniorch
from kernel_util import capture, groups, outline

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
F = torch.nn.functional


def _dups(n, hi, neg=False):
    """Indices with repeats (and, if asked, negative ones meaning from the end)."""
    i = torch.randint(0, hi, (n,))
    i[1] = i[0]
    if neg:
        i[2] = i[2] - hi
    return i


def _uniq(n, hi):
    return torch.randperm(hi)[:n]


def _nan_src(shape):
    s = torch.randn(shape)
    s.view(-1)[::5] = float("nan")
    return s


def _unsort(perm, rows):
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(perm.size(0))
    return rows[inverse]


CASES = {
    "index_put_acc_dups_neg": (lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True),
                               lambda: (torch.randn(8, 4), _dups(6, 8, neg=True), torch.randn(6, 4))),
    "index_put_broadcast_row": (lambda x, i, v: torch.index_put(x, (i,), v),
                                lambda: (torch.randn(8, 4), _uniq(3, 8) - 4, torch.randn(4))),
    "index_put_two_indices_acc": (lambda x, i, j, v: torch.index_put(x, (i, j), v, accumulate=True),
                                  lambda: (torch.randn(5, 6), _dups(7, 5), _dups(7, 6), torch.randn(7))),
    "index_put_bool_mask": (lambda x, m, v: torch.index_put(x, (m,), v),
                            lambda: (torch.randn(5, 3), torch.rand(5) > 0.5, torch.randn(3))),
    "index_add_dups_alpha": (lambda x, i, s: torch.index_add(x, 1, i, s, alpha=2.0),
                             lambda: (torch.randn(3, 6), _dups(5, 6), torch.randn(3, 5))),
    "index_copy": (lambda x, i, s: torch.index_copy(x, 0, i, s), lambda: (torch.randn(6, 3), _uniq(4, 6), torch.randn(4, 3))),
    "index_fill": (lambda x, i: torch.index_fill(x, 1, i, -1.5), lambda: (torch.randn(4, 5), _uniq(2, 5))),
    "scatter_src": (lambda x, i, s: torch.scatter(x, 1, i, s),
                    lambda: (torch.randn(4, 6), torch.stack([_uniq(3, 6) for _ in range(4)]), torch.randn(4, 3))),
    "scatter_value": (lambda x, i: torch.scatter(x, 0, i, 3.0),
                      lambda: (torch.randn(5, 3), torch.stack([_uniq(2, 5) for _ in range(3)], 1))),
    "scatter_add_dups": (lambda x, i, s: torch.scatter_add(x, 0, i, s),
                         lambda: (torch.randn(4, 3), torch.randint(0, 4, (6, 3)), torch.randn(6, 3))),
    "scatter_reduce_amax_nan": (lambda x, i, s: torch.scatter_reduce(x, 1, i, s, "amax"),
                                lambda: (_nan_src((3, 5)), torch.randint(0, 5, (3, 7)), _nan_src((3, 7)))),
    "scatter_reduce_amin_no_self": (lambda x, i, s: torch.scatter_reduce(x, 1, i, s, "amin", include_self=False),
                                    lambda: (torch.randn(3, 5), torch.randint(0, 5, (3, 7)), _nan_src((3, 7)))),
    "scatter_reduce_prod": (lambda x, i, s: torch.scatter_reduce(x, 0, i, s, "prod"),
                            lambda: (torch.randn(4, 2), torch.randint(0, 4, (6, 2)), torch.randn(6, 2))),
    "scatter_reduce_mean_no_self": (lambda x, i, s: torch.scatter_reduce(x, 0, i, s, "mean", include_self=False),
                                    lambda: (torch.randn(4, 2), torch.randint(0, 4, (6, 2)), torch.randn(6, 2))),
    "scatter_reduce_sum_f64": (lambda x, i, s: torch.scatter_reduce(x, 1, i, s, "sum"),
                               lambda: (torch.randn(2, 3).double(), torch.randint(0, 3, (2, 5)), torch.randn(2, 5).double())),
    "scatter_reduce_amax_int64": (lambda x, i, s: torch.scatter_reduce(x, 0, i, s, "amax"),
                                  lambda: (torch.randint(-9, 9, (4,)), torch.randint(0, 4, (9,)), torch.randint(-9, 9, (9,)))),
    "scatter_reduce_amin_f16": (lambda x, i, s: torch.scatter_reduce(x, 0, i, s, "amin"),
                                lambda: (torch.randn(5).half(), torch.randint(0, 5, (9,)), torch.randn(9).half())),
    "index_put_acc_f16": (lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True),
                          lambda: (torch.randn(6).half(), _dups(5, 6), torch.randn(5).half())),
    "index_put_acc_int64": (lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True),
                            lambda: (torch.randint(-5, 5, (6, 2)), _dups(5, 6, neg=True), torch.randint(-5, 5, (5, 2)))),
    "index_reduce_prod": (lambda x, i, s: x.index_reduce(0, i, s, "prod"),
                          lambda: (torch.randn(4, 3), _dups(5, 4), torch.randn(5, 3))),
    "put_acc_neg": (lambda x, i, s: torch.put(x, i, s, accumulate=True),
                    lambda: (torch.randn(3, 4), _dups(5, 12, neg=True), torch.randn(5))),
    "max_unpool2d": (lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2),
                     lambda: (torch.randn(1, 2, 4, 6),)),
    # negative dims crashed torch-mlir's import (segfault); integer means round down, as ATen
    "scatter_add_negative_dim": (lambda x, i, s: torch.scatter_add(x, -1, i, s),
                                 lambda: (torch.randn(3, 5), torch.randint(0, 5, (3, 4)), torch.randn(3, 4))),
    "scatter_reduce_mean_int64": (lambda x, i, s: torch.scatter_reduce(x, 0, i, s, "mean"),
                                  lambda: (torch.randint(-9, 9, (4, 2)), torch.randint(0, 4, (7, 2)), torch.randint(-9, 9, (7, 2)))),
    "scatter_multiply_arg": (lambda x, i, s: torch.scatter(x, 1, i, s, reduce="multiply"),
                             lambda: (torch.randn(3, 5), torch.randint(0, 5, (3, 4)), torch.randn(3, 4))),
    # the destination is a slice of an intermediate buffer / the updates share its storage:
    # plan-memory must not let the result alias it
    "slice_destination": (lambda a, i, v: torch.index_put((a + 1)[2:6], (i,), v, accumulate=True),
                          lambda: (torch.randn(8, 4), _dups(3, 4), torch.randn(3, 4))),
    "updates_share_destination": (lambda a, i: torch.index_put(a * 2, (i,), (a * 2)[:3], accumulate=True),
                                  lambda: (torch.randn(6, 2), _dups(3, 6))),
    "noncontiguous_destination": (lambda x, i, s: torch.index_add(x, 0, i, s),
                                  lambda: (torch.randn(5, 7).t(), _dups(4, 7), torch.randn(4, 5))),
    # into a fresh tensor (the destination is the kernel's own output): transformers' MoE unsorts
    # its experts' rows so; "scatter operands must be kernel arguments" sent the ops to PyTorch
    "inverse_permutation": (_unsort, lambda: (torch.randperm(9), torch.randn(9, 3))),
}


def _close(out, ref):
    assert out.dtype == ref.dtype and out.shape == ref.shape
    if ref.dtype.is_floating_point:
        tol = 1e-2 if ref.dtype == torch.float16 else 1e-5
        torch.testing.assert_close(out, ref, rtol=tol, atol=tol, equal_nan=True)
    else:
        assert torch.equal(out, ref)


@pytest.mark.parametrize("case", sorted(CASES))
def test_scatter_ops_compile_to_scatter_kernels(case):
    fn, make = CASES[case]
    args = make()
    rep = uniorch.explain(fn, *args, target="interpret")
    assert not rep.fallbacks, rep
    if case != "index_put_bool_mask":  # a select, no scatter
        assert "scatter" in [k.kind for k in rep.kernels], rep
    cm = uniorch.compile(fn, target="interpret")
    args = make()  # fresh values (same shapes: the cached kernels)
    keep = [a.clone() for a in args]
    _close(cm(*args), fn(*keep))
    for a, k in zip(args, keep):  # inputs are never written
        assert torch.equal(a.nan_to_num(), k.nan_to_num())


@pytest.mark.parametrize("case", ["scatter_add_dups", "scatter_src", "scatter_reduce_amax_nan"])
def test_scatter_coordinates_written_once(case):
    """torch-mlir assembles a scatter's [N, depth] coordinates from [N, 1] columns inserted into a
    fill, a copy kernel per column; passes/scatter_coords.py makes them one generic, and the
    scatter kernel computes them itself (passes/fuse_scatter.py): no kernel writes coordinates
    or the flattened updates, and the scatter reads each index and update element once (and
    eager agrees, above)."""
    fn, make = CASES[case]
    args = make()
    rep = uniorch.explain(fn, *args, target="interpret")
    assert not rep.fallbacks, rep
    assert [k.kind for k in rep.kernels] == ["scatter"], rep
    x, index, src = args[0], args[1], args[2]
    # destination, index and the updates' source, each read once
    assert rep.kernels[0].bytes_read <= (x.numel() * x.element_size() + index.numel() * 8
                                         + src.numel() * src.element_size()), rep


def _scatter_source(fn, args, target="interpret"):
    from uniorch.codegen.scatter import generate_scatter

    module = capture(fn, args)
    (ops,) = [g for g in groups(module).values() if any(o.name == "tm_tensor.scatter" for o in g)]
    assert [o.name for o in ops] == ["tm_tensor.scatter"]  # one kernel: the scatter alone
    kernel, _, _ = outline(module, ops, kind="scatter")
    with kernel.context:
        ks = generate_scatter(kernel, target)
        from uniorch.codegen import pointer_types

        ks.pointer_types = pointer_types(kernel)
        inplace = [int(str(a).split(":")[0]) for a in kernel.attributes["uniorch.inplace"]]
    return ks, inplace


@pytest.mark.parametrize("fn,op", [
    (lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True), "tl.atomic_add("),
    (lambda x, i, v: torch.index_put(x, (i,), v), "tl.store(out0_ptr + dst, val"),
    (lambda x, i, v: x.index_reduce(0, i, v, "prod"), "tl.atomic_cas("),
])
def test_scatter_kernel_source(fn, op):
    """One kernel per scatter, writing into the destination's copy (`uniorch.inplace` names the
    original), combining with a store, an atomic add, or a compare-and-swap loop."""
    args = (torch.randn(6, 3), torch.tensor([0, 2, 2]), torch.randn(3, 3))
    ks, inplace = _scatter_source(fn, args)
    assert op in ks.source, ks.source
    assert len(inplace) == 1


def test_unsupported_combiner_runs_eagerly_with_a_reason():
    """Bool destinations have no atomics: an accumulating index_put on them stays eager."""
    fn = lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True)  # noqa: E731
    args = (torch.zeros(5, dtype=torch.bool), torch.tensor([1, 1, 3]), torch.tensor([True, False, True]))
    rep = uniorch.explain(fn, *args, target="interpret")
    out = uniorch.compile(fn, target="interpret")(*args)
    assert torch.equal(out, fn(*args))
    assert [f.stage for f in rep.fallbacks] == ["codegen"], rep
    assert "no atomic add for element type i1" in rep.fallbacks[0].why, rep


@pytest.mark.parametrize("target", [("cuda", 90, 32), ("hip", "gfx942", 64)])
@pytest.mark.parametrize("reduce", ["sum", "prod", "amax"])
def test_scatter_kernel_compiles_for_gpus(target, reduce):
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget

    from uniorch.runtime import loader

    fn = lambda x, i, s: torch.scatter_reduce(x, 1, i, s, reduce)  # noqa: E731
    args = (torch.randn(4, 8), torch.randint(0, 8, (4, 5)), torch.randn(4, 5))
    name = "cuda:sm_90" if target[0] == "cuda" else "rocm:gfx942"
    ks, _ = _scatter_source(fn, args, name)
    jit_fn = loader.load(ks, interpret=False)
    src = triton.compiler.ASTSource(jit_fn, signature=ks.signature(), constexprs=ks.constexprs)
    compiled = triton.compile(src, target=GPUTarget(*target), options={"num_warps": ks.num_warps})
    assert "tt.atomic" in compiled.asm["ttir"]


# -- regressions found by the OpInfo coverage tool (each fell back to eager before) ---------------
REGRESSIONS = {
    # a 0-d index: the interpreter mislabelled a scalar comparison, breaking the load mask
    "embedding_0d_index": (lambda w, i: F.embedding(i, w), lambda: (torch.randn(10, 5), torch.tensor(7))),
    "max_pool2d_ceil_indices": (lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True, return_indices=True),
                                lambda: (torch.randn(1, 2, 3, 6),)),
    "max_pool1d_ceil_indices": (lambda x: F.max_pool1d(x, 3, 2, ceil_mode=True, return_indices=True),
                                lambda: (torch.randn(1, 2, 3),)),
    "bucketize_0d": (lambda x, b: torch.bucketize(x, b, right=True), lambda: (torch.randn(()), torch.randn(5).sort().values)),
    # torch-mlir read an uninitialised index accumulator; PyTorch's decomposition is exact
    "adaptive_max_pool3d_unbatched": (lambda x: F.adaptive_max_pool3d(x, (4, 3, 5), True),
                                      lambda: (torch.randn(2, 4, 3, 5),)),
    # global pooling: amax and an argmax over the flattened volume (torch 2.11 has no decomposition)
    "adaptive_max_pool3d_global": (lambda x: F.adaptive_max_pool3d(x, 1, True), lambda: (torch.randn(2, 2, 4, 3, 5),)),
    "adaptive_max_pool3d_global_unbatched": (lambda x: F.adaptive_max_pool3d(x, (1, 1, 1), True),
                                             lambda: (torch.randn(2, 4, 3, 5),)),
}


@pytest.mark.parametrize("case", sorted(REGRESSIONS))
def test_opinfo_regressions_compile(case):
    fn, make = REGRESSIONS[case]
    args = make()
    rep = uniorch.explain(fn, *args, target="interpret")
    assert not rep.fallbacks, rep
    args = make()
    out, ref = uniorch.compile(fn, target="interpret")(*args), fn(*args)
    out, ref = (out, ref) if isinstance(ref, tuple) else ((out,), (ref,))
    for o, r in zip(out, ref):
        assert torch.equal(o, r)


def test_adaptive_max_pool3d_uneven_unbatched_keeps_the_rest_compiled():
    """Windows of unequal size have no rewrite: the one op runs eagerly, and the model around it
    still compiles (unpacking the batched call's NotImplemented used to fail the whole capture)."""
    fn = lambda x: F.adaptive_max_pool3d(x * 2, (4, 3, 5), True)  # noqa: E731 - an exact kernel before it
    rep = uniorch.explain(fn, torch.randn(2, 5, 3, 5), target="interpret")
    assert [f.op for f in rep.fallbacks] == ["aten.adaptive_max_pool3d.default"], rep
    assert rep.kernels, rep
    x = torch.randn(2, 5, 3, 5)
    for o, r in zip(uniorch.compile(fn, target="interpret")(x), fn(x)):
        assert torch.equal(o, r)


@pytest.mark.parametrize("case", sorted(c for c in REGRESSIONS if c.startswith("adaptive_max_pool3d")))
def test_adaptive_max_pool3d_without_torchs_decomposition(case, monkeypatch):
    """torch 2.11 has no decomposition of adaptive_max_pool3d (2.13 has): capture's rewrite stands
    on its own."""
    from torch._decomp import decomposition_table as torch_table

    monkeypatch.delitem(torch_table, torch.ops.aten.adaptive_max_pool3d.default, raising=False)
    test_opinfo_regressions_compile(case)
