"""Python int arguments as symbolic sizes (capture/int_sizes.py) and export's guards relating
size symbols (runtime/size_guards.py), against eager on fresh inputs."""
import pytest
import torch
import torch.nn.functional as F

import uniorch


class CachedAttention(torch.nn.Module):
    """Meta's Llama pattern: a cache buffer written at `start_pos`, read up to `start_pos + T`."""

    def __init__(self, d=16, max_len=24):
        super().__init__()
        self.wq, self.wk = torch.nn.Linear(d, d), torch.nn.Linear(d, d)
        self.register_buffer("cache", torch.zeros(1, max_len, d))
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d))

    def forward(self, x, start_pos: int):
        t = x.shape[1]
        pos = torch.arange(start_pos, start_pos + t, dtype=torch.float32)
        x = x * torch.outer(pos, self.inv_freq).cos().repeat(1, 2)
        self.cache[:, start_pos:start_pos + t] = self.wk(x)
        keys = self.cache[:, :start_pos + t]
        scores = self.wq(x) @ keys.transpose(1, 2) / keys.shape[-1] ** 0.5
        return F.softmax(scores, -1) @ keys


def _pair():
    model = CachedAttention().eval()
    ref = CachedAttention().eval()
    ref.load_state_dict(model.state_dict())
    return model, ref


@pytest.mark.parametrize("dynamic", [None, True])
def test_a_decode_loop_compiles_once_for_every_position(dynamic):
    model, ref = _pair()
    cm = uniorch.compile(model, target="interpret", dynamic=dynamic)
    with torch.no_grad():
        x = torch.randn(1, 5, 16)
        torch.testing.assert_close(cm(x, 0), ref(x, 0))
        for pos in range(5, 14):
            x = torch.randn(1, 1, 16)
            torch.testing.assert_close(cm(x, pos), ref(x, pos))
    torch.testing.assert_close(model.cache, ref.cache)
    # the prefill at 0 and one compile with start_pos symbolic; not one per position
    assert cm.cache_size == 2, cm.recompiles
    assert "(an int)" in cm.recompiles[-1], cm.recompiles


def test_an_int_in_arithmetic_and_factories_stays_symbolic():
    def fn(x, n: int, scale: float):
        ramp = torch.arange(n, dtype=x.dtype) * scale
        return (x[..., None] * n + ramp).sum(-1), torch.zeros(n, 3) + x.mean()

    cm = uniorch.compile(fn, target="interpret", dynamic=True)
    for n in (3, 7, 4, 11):
        x = torch.randn(4, 6)
        for got, want in zip(cm(x, n, 0.5), fn(x, n, 0.5)):
            torch.testing.assert_close(got, want)
    assert cm.cache_size == 1, cm.recompiles


def test_an_int_that_picks_a_branch_follows_it():
    def fn(x, n: int):
        return x * 2 if n > 4 else x[:, :n].sum(-1, keepdim=True) + x

    cm = uniorch.compile(fn, target="interpret")
    for n in (2, 3, 6, 9, 3, 4):  # 0 and 1 and any branch change: what eager computes
        x = torch.randn(3, 8)
        torch.testing.assert_close(cm(x, n), fn(x, n))


def _prefix(x, y):
    n = y.shape[0]
    return x[:n] * n, torch.arange(n, dtype=x.dtype)[:, None].expand(n, x.shape[1])


def _prefix_int(x, n: int):
    return _prefix(x, torch.empty(n))


@pytest.mark.parametrize("fn,arg", [(_prefix, torch.randn), (_prefix_int, int)], ids=["tensor", "int"])
def test_a_relation_export_assumed_is_checked_at_every_call(fn, arg):
    """Traced with 4 <= 12 rows, `x[:n]` keeps n rows; at n = 13 eager keeps 12 and the arange
    has 13: the guard `n <= rows` fails, and the call compiles anew instead of a wrong answer."""
    cm = uniorch.compile(fn, target="interpret", dynamic=True)
    for n in (4, 7, 13, 20, 5):
        x = torch.randn(12, 5)
        for got, want in zip(cm(x, arg(n)), fn(x, arg(n))):
            torch.testing.assert_close(got, want)
    assert any("size guard" in r for r in cm.recompiles), cm.recompiles
    # and the slice's clamp min(n, rows) is decided by that guard: no slice left to PyTorch
    rep = cm.explain(torch.randn(12, 5), arg(6))
    assert rep.symbolic and not rep.fallbacks, str(rep)


def test_bundle_takes_the_int_and_checks_the_relation(tmp_path):
    from uniorch.runtime.bundle import InputSpecError

    uniorch.compile_aot(_prefix_int, (torch.randn(12, 5), 4), target="interpret", dynamic=True).save(
        str(tmp_path / "b"))
    fn = uniorch.load(str(tmp_path / "b"))
    for n in (2, 9, 12):
        x = torch.randn(12, 5)
        for got, want in zip(fn(x, n), _prefix_int(x, n)):
            torch.testing.assert_close(got, want)
    with pytest.raises(InputSpecError, match=r"size guard s\d+ <= s\d+ does not hold: .*args\[1\]"):
        fn(torch.randn(12, 5), 13)


def test_dims_that_varied_in_another_argument_structure_are_ignored():
    """generate's decode calls (more arguments: the cache) record which of their dims varied; a
    prefill at a new length then compiled symbolic with those positions too, past its own
    arguments: the symbolic compile failed and every prompt length compiled anew."""
    def fn(*xs):
        return sum(x.sum(-1) for x in xs)

    cm = uniorch.compile(fn, target="interpret")
    for t in (4, 6):
        xs = [torch.randn(2, t) for _ in range(3)]
        torch.testing.assert_close(cm(*xs), fn(*xs))
    for t in (5, 7, 9):
        x = torch.randn(2, t)
        torch.testing.assert_close(cm(x), fn(x))
    assert "compiled with symbolic sizes" in cm.recompiles[-1], cm.recompiles
    assert cm.cache_size == 4, cm.recompiles  # 3 args: static, symbolic; 1 arg: static, symbolic


def test_floor_division_of_a_negative_size_expression_floors():
    """The ceil idiom `-(-n // 4)`: the kernel printed floor(-n / 4) as Triton's `//`, which
    truncates toward zero: 2 for n = 10 where eager gives 3, and rows of the slice unwritten."""
    def fn(x, n: int):
        return x * (-(-n // 4)), x[: -(-n // 4)] * 2, x * ((n - 7) // 3)

    cm = uniorch.compile(fn, target="interpret")
    for n in (9, 10, 3, 13, 5):
        x = torch.randn(12, 3)
        for got, want in zip(cm(x, n), fn(x, n)):
            torch.testing.assert_close(got, want)


def test_min_of_an_int_and_a_constant_keeps_its_range():
    """`x[:min(n, 6)]` traced at n = 9: the decompositions' retrace narrowed n to 6 and up, a
    rewrite took min(n, 6) as 6 by it, and the guard kept 2 and up: n = 3 got 6 rows."""
    def fn(x, n: int):
        return x[: min(n, 6)] * 2, x[: max(n, 6)] + 1

    cm = uniorch.compile(fn, target="interpret", dynamic=True)
    for n in (9, 3, 11, 2, 7):
        x = torch.randn(12, 3)
        for got, want in zip(cm(x, n), fn(x, n)):
            torch.testing.assert_close(got, want)


@pytest.mark.parametrize("as_int", [True, False], ids=["int", "dim"])
def test_an_equality_branch_is_guarded(as_int):
    """`if n == 3` traced at other n guards `n != 3`, which no range holds: it was dropped as if
    it were one, and n = 3 took the other branch."""
    def fn(x, n):
        n = n if as_int else n.shape[0]
        return x * 100 if n == 3 else x[:n] + 1

    cm = uniorch.compile(fn, target="interpret", dynamic=True)
    for n in (5, 6, 3, 7):
        x = torch.randn(10, 4)
        arg = n if as_int else torch.empty(n)
        torch.testing.assert_close(cm(x, arg), fn(x, arg))


def test_a_roll_by_an_int_compiles_ahead_of_time():
    """A roll's concatenation of an input's slices is no kernel's result: the launch plan raised an
    AttributeError, which crashed compile_aot(dynamic=True). It is a fallback now, as in the JIT."""
    def fn(x, n: int):
        return x + x.roll(n, 1)

    art = uniorch.compile_aot(fn, (torch.randn(2, 12), 3), target="interpret", dynamic=True)
    assert any("no kernel's result" in f.why for f in art.fallbacks), art.fallbacks
    cm = uniorch.compile(fn, target="interpret", dynamic=True)
    for n in (3, 5, 7):
        x = torch.randn(2, 12)
        torch.testing.assert_close(cm(x, n), fn(x, n))


def _pad_to_4(x, k: int):
    padded = F.pad(x, (0, (-x.shape[-1]) % 4))
    return padded.view(x.shape[0], -1, 4).sum(-1), x * ((-k) % 8) + k % 3


def test_padding_to_a_multiple_stays_symbolic(tmp_path):
    """`(-n) % 4`: torch-mlir imported Python's `%` of sizes as aten.fmod.int, which nothing lowers,
    the guard's `PythonMod` was no size expression, and the reshape's `?` dim 4 read as unknown:
    every length compiled anew. Now one symbolic compile serves them (a view to width 1 recompiles
    by export's guard), and the bundle checks the same guard."""
    cm = uniorch.compile(_pad_to_4, target="interpret", dynamic=True)
    for n, k in ((9, 5), (10, 13), (6, 2), (13, 22), (8, 3)):
        x = torch.randn(2, n)
        for got, want in zip(cm(x, k), _pad_to_4(x, k)):
            torch.testing.assert_close(got, want)
    assert cm.cache_size == 1, cm.recompiles
    rep = cm.explain(torch.randn(2, 11), 7)
    assert rep.symbolic and not rep.fallbacks, str(rep)
    uniorch.compile_aot(_pad_to_4, (torch.randn(2, 9), 5), target="interpret", dynamic=True).save(
        str(tmp_path / "b"))
    fn = uniorch.load(str(tmp_path / "b"))
    for n, k in ((7, 6), (14, 9)):
        x = torch.randn(2, n)
        for got, want in zip(fn(x, k), _pad_to_4(x, k)):
            torch.testing.assert_close(got, want)


def _branching(x, n: int):
    y = x[:, :n] * 2
    if y.sum() > 0:  # a branch on a value: export cannot capture it, Dynamo splits the function
        y = y + n
    return y.cumsum(1) * n


def test_an_int_of_a_function_dynamo_splits_is_symbolic():
    """Every new int went through export again (which failed again) and Dynamo compiled one graph
    per value: 16 values filled the cache and later calls ran eagerly. Once Dynamo has served an
    argument structure it serves its other sizes and ints, symbolic after the first change; a
    negative int runs that graph in PyTorch."""
    cm = uniorch.compile(_branching, target="interpret")
    for n in [2, 3] + list(range(5, 25)) + [-3, 4]:
        for sign in (1, -1):
            x = sign * torch.randn(4, 30).abs()
            torch.testing.assert_close(cm(x, n), _branching(x, n))
    assert cm.cache_size <= 1, cm.recompiles
    rep = cm.explain(torch.randn(4, 30).abs(), 25)
    assert not rep.fallbacks and rep.symbolic, str(rep)
