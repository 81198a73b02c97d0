"""Data-dependent output sizes and Python scalars (capture/data_dependent.py): computed padded in
kernels, trimmed at the boundary; compared with eager on fresh inputs with different counts."""
import pytest
import torch
import torch.nn.functional as F

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _sparse(*shape, keep=0.5):
    x = torch.randn(*shape)
    return torch.where(torch.rand(*shape) < keep, x, torch.zeros(()))


CASES = {
    "nonzero": lambda x: torch.nonzero(x),
    "argwhere_3d": lambda x: torch.argwhere(x.reshape(2, 3, -1)),
    "masked_select": lambda x: torch.masked_select(x * 2, x > 0),
    "unique": lambda x: torch.unique(x.round(), return_inverse=True, return_counts=True),
    "unique_plain": lambda x: torch.unique((x * 2).round()),
    "unique_unsorted": lambda x: torch.unique(x.round(), sorted=False, return_counts=True),
    "unique_consecutive": lambda x: torch.unique_consecutive(x.round(), return_inverse=True, return_counts=True),
    "item": lambda x: ((x > 0).sum().item(), x.abs().amax().item(), x + 1),  # exact: no summation order
    "nonzero_and_more": lambda x: (torch.nonzero(x > 0.3), x.softmax(-1)),
    # boolean-mask indexing (capture's `_index_by_mask`): a gather of the kept rows, trimmed
    "mask_all_dims": lambda x: (x * 3)[x > 0],
    "mask_rows": lambda x: x.exp()[x[:, 0] > 0],
    "mask_middle_dim": lambda x: x.reshape(2, 3, 8)[:, x[0, :3] != 0],
    "mask_columns": lambda x: x[:, x[0] > 0],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_data_dependent_outputs_compile(case):
    fn = CASES[case]
    x = _sparse(6, 8)
    rep = uniorch.explain(fn, x, target="interpret")
    assert not rep.fallbacks, rep
    cm = uniorch.compile(fn, target="interpret")
    for keep in (0.5, 0.1, 0.9):  # one compile, counts differ per call
        x = _sparse(6, 8, keep=keep)
        out, ref = cm(x), fn(x)
        assert type(out) is type(ref)
        torch.testing.assert_close(out, ref)


def test_a_count_that_feeds_more_ops_stays_eager():
    def fn(x):
        return x[x > 0].amax()  # the max over the kept rows: eager raises when none is kept

    x = _sparse(5, 5)
    x[2, 3] = 0.5  # at least one kept: with none, eager raises too (CI drew such an input once)
    cm = uniorch.compile(fn, target="interpret")
    torch.testing.assert_close(cm(x), fn(x))
    assert any(f.op.startswith("aten.amax") for f in cm.explain(x).fallbacks)


def _masked_ce(x, m):
    labels = (x[:, 1] * 100).long().remainder(8)
    return F.cross_entropy(x[m[:, 0]], labels[m[:, 0]])


def _write_back(x, m):
    y = x.clone()
    y[m] = x[m] * 2 + 1
    return y


# reductions over the rows a mask keeps (capture/masked_reductions.py): no op waits for the count
MASKED = {
    "mean": lambda x, m: x[m].mean(),
    "sum_of_rows": lambda x, m: (x.exp()[m[:, 0]] * 2).sum(0),
    "mean_of_columns": lambda x, m: x[:, m[0]].sigmoid().mean(1, keepdim=True),
    "mse": lambda x, m: ((x[m] - x.flip(0)[m]) ** 2).mean(),
    "masked_select_sum": lambda x, m: torch.masked_select(x.abs(), m).sum() / m.sum(),
    "nonzero_mean": lambda x, m: torch.nonzero(m).float().mean(0),
    "cross_entropy": _masked_ce,
    "returned_too": lambda x, m: (x[m] * 2, (x[m] * 2).sum()),
    "returned_columns": lambda x, m: (x[:, m[0]].exp(), x[:, m[0]].sum(1)),
    "write_back": _write_back,
    "unique_sum": lambda x, m: torch.unique((x * 2).round()).sum(),
}


@pytest.mark.parametrize("case", sorted(MASKED))
def test_reductions_over_masked_rows_compile_without_a_host_read(case):
    fn = MASKED[case]
    rep = uniorch.explain(fn, torch.randn(6, 8), torch.rand(6, 8) > 0.5, target="interpret")
    if case.startswith("returned"):  # the selection itself is trimmed at the boundary
        assert not rep.fallbacks and [b.split(":")[0] for b in rep.boundary] == ["output 0"], rep
    else:
        assert not rep.fallbacks and not rep.boundary, rep
    cm = uniorch.compile(fn, target="interpret")
    for keep in (0.5, 0.1, 0.0, 1.0):  # one compile; none kept: a sum of 0, a mean of NaN, as eager's
        x, m = torch.randn(6, 8), torch.rand(6, 8) < keep
        torch.testing.assert_close(cm(x, m), fn(x, m), equal_nan=True)
    assert cm.cache_size == 1


@pytest.mark.parametrize("case", ["mean", "write_back"])
def test_a_masked_mean_or_write_is_one_kernel_reading_each_input_once(case):
    """The selection is never compacted: the kernel reads x and the mask in place, and where the
    mask is false contributes nothing (the compaction was a scan, a scatter and a gather, 5 kernels)."""
    rep = uniorch.explain(MASKED[case], torch.randn(16, 32), torch.rand(16, 32) > 0.5, target="interpret")
    assert len(rep.kernels) == 1 and not rep.fallbacks, rep
    assert rep.bytes_moved <= rep.bytes_minimum, rep


def test_a_bf16_mean_over_masked_rows_rounds_once_as_eager():
    fn = lambda x, m: x[m].mean()  # noqa: E731
    cm = uniorch.compile(fn, target="interpret")
    for _ in range(3):
        x, m = torch.randn(16, 32).bfloat16(), torch.rand(16, 32) > 0.3
        assert torch.equal(cm(x, m), fn(x, m))


def test_bundle_trims_at_the_boundary(tmp_path):
    def fn(x):
        return torch.masked_select(x, x > 0), torch.nonzero(x)

    rep = uniorch.explain(fn, _sparse(4, 6), target="interpret")
    assert [b.split(":")[0] for b in rep.boundary] == ["output 0", "output 1"] and "trimmed" in str(rep)
    uniorch.compile_aot(fn, (_sparse(4, 6),), target="interpret").save(str(tmp_path / "dd"))
    loaded = uniorch.load(str(tmp_path / "dd"))
    x = _sparse(4, 6, keep=0.3)
    torch.testing.assert_close(loaded(x), fn(x))


def test_a_loss_over_masked_rows_compiles_its_gather_and_matches_eager():
    """`cross_entropy(logits[labels != -100], labels[labels != -100])`, a common training loss: the
    boolean index went to torch-mlir as an integer index, which aborted the whole process (LLVM
    out of memory) while compiling. Now the loss is kernels (masked_reductions.py), no eager op."""
    import torch.nn.functional as F

    fn = lambda lg, lb: F.cross_entropy(lg[lb != -100], lb[lb != -100])  # noqa: E731
    cm = uniorch.compile(fn, target="interpret")
    for ignored in (3, 9):
        logits, labels = torch.randn(4, 16, 50), torch.randint(0, 50, (4, 16))
        labels[:, :ignored] = -100
        torch.testing.assert_close(cm(logits, labels), fn(logits, labels))
    rep = cm.explain(logits, labels)
    assert not rep.fallbacks and not rep.boundary, rep


@pytest.mark.parametrize("case", ["div", "rsub", "output_too", "f64", "f16"])
def test_a_value_read_with_item_into_arithmetic_stays_on_the_device(case):
    """`x / x.abs().max().item()`: the Python float fed div as a scalar, which no kernel takes, so
    the read and the ops it fed ran eagerly (capture/scalar_reads.py). Exact ops (max, min) keep
    eager's bits; a 16-bit operand keeps the eager scalar form (its op reads the scalar at fp32)."""
    fn = {"div": lambda x: x / x.abs().max().item(),
          "rsub": lambda x: x.amin().item() - x * 2,
          "output_too": lambda x: (x.max().item(), x * x.max().item()),
          "f64": lambda x: x.double() / x.double().abs().max().item(),
          "f16": lambda x: x.half() / x.abs().max().item()}[case]
    cm = uniorch.compile(fn, target="interpret")
    for _ in range(2):  # a fresh value each call: not a constant of the compile
        x = torch.randn(16, 33)
        out, ref = cm(x), fn(x)
        assert type(out) is type(ref)
        if case == "output_too":
            assert out[0] == ref[0] and torch.equal(out[1], ref[1])
        else:
            assert torch.equal(out, ref)
    fallbacks = [f.op for f in cm.explain(x).fallbacks]
    assert (fallbacks != []) == (case == "f16"), fallbacks


def test_an_int_from_item_used_in_arithmetic_under_torch_compile():
    """`int(t.item()) % 3` is a graph input of Dynamo's next graph whose expression is no size:
    capture recorded every int input as a size and raised 'not a size expression' at the second
    call (the first compiles a specialized graph)."""

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            h = self.lin(x)
            h = h * 2 if h.mean() > 0 else h - 1
            return h + int(h.abs().sum().item()) % 3

    torch.manual_seed(0)
    model = Model().eval()
    compiled = torch.compile(model, backend="uniorch")
    with torch.no_grad():
        for i in range(4):
            x = torch.randn(3, 8) + (i - 1.5)
            torch.testing.assert_close(compiled(x), model(x))


def test_a_data_dependent_length_is_reported_as_such():
    """bincount's length depends on its input's values: it and what reads it run in PyTorch, as
    eager, and explain says why in those words rather than as an internal error."""
    def f(x):
        return torch.bincount(x, minlength=5).float() * 2

    x = torch.randint(0, 7, (20,))
    cm = uniorch.compile(f)
    assert torch.equal(cm(x), f(x))
    whys = [fb.why for fb in cm.explain(x).fallbacks if "bincount" in fb.op]
    assert whys and all("data-dependent size" in w and "internal error" not in w for w in whys), whys


@pytest.mark.parametrize("fn", [lambda x: torch.where(x > 0.5)[0], lambda x: torch.where(x > 0.5),
                                lambda x: (x > 0.5).nonzero(as_tuple=True)[1]], ids=["where0", "where", "as_tuple1"])
def test_one_argument_where_gives_eagers_indices(fn):
    # a size from the data made the output-layout record ask is_contiguous() of it, and the
    # GuardOnDataDependentSymNode reached the user with no fallback
    x = torch.rand(4, 9)
    got, want = uniorch.compile(fn)(x), fn(x)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert torch.equal(g, w)
