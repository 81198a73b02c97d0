"""Random ops compile (passes/seed_input.py): right distributions, fresh numbers per call,
reproducible under torch.manual_seed, and compiling leaves the caller's random stream alone.
The stream differs from eager's, as with Inductor; only statistics are compared."""
import torch

import uniorch


def model(x):
    d = torch.nn.functional.dropout(x, 0.5, training=True)
    return d, torch.rand_like(x), torch.randn(400, 100), torch.bernoulli(torch.full((200, 50), 0.3))


def test_random_ops_compile_with_the_right_statistics():
    x = torch.randn(64, 64)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    d, u, n, b = cm(x)
    assert not cm.explain(x).fallbacks
    kept = d != 0
    assert 0.45 < (~kept).float().mean() < 0.55
    torch.testing.assert_close(d[kept], 2 * x[kept])  # survivors scaled by 1 / (1 - p)
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.02
    assert abs(n.mean()) < 0.02 and abs(n.std() - 1) < 0.02
    assert abs(b.float().mean() - 0.3) < 0.02 and set(b.unique().tolist()) <= {0.0, 1.0}
    assert not torch.equal(u, torch.rand_like(x))  # sanity: not all-equal streams


def test_fresh_numbers_per_call_and_reproducible_under_manual_seed():
    x = torch.randn(32, 32)
    cm = uniorch.compile(model, target="interpret")
    torch.manual_seed(7)
    a = cm(x)  # compiles first: that must not consume the caller's random stream
    torch.manual_seed(7)
    b = cm(x)
    c = cm(x)
    assert all(torch.equal(p, q) for p, q in zip(a, b))
    assert not torch.equal(a[1], c[1]) and not torch.equal(a[2], c[2])
    # two random ops in one call draw different numbers
    assert not torch.equal(a[1].flatten()[:100], a[2].flatten()[:100])


def test_randint_like_compiles_in_range():
    def f(x):
        return torch.randint_like(x, 3, 10), torch.randint_like(x, 5, dtype=torch.int64)

    x = torch.zeros(100, 100)
    cm = uniorch.compile(f, target="interpret", fallback="error")
    a, b = cm(x)
    assert not cm.explain(x).fallbacks
    assert a.dtype == x.dtype and a.shape == x.shape and b.dtype == torch.int64
    assert set(a.unique().tolist()) == set(range(3, 10)) and set(b.unique().tolist()) == set(range(5))


def test_float_randint_draws_integers():
    def f(x):
        return torch.randint(3, 10, (400,), dtype=torch.float32), torch.randint(-5, 5, (400,), dtype=torch.float64)

    a, b = uniorch.compile(f, target="interpret", fallback="error")(torch.zeros(1))
    assert set(a.tolist()) == set(float(v) for v in range(3, 10)) and a.dtype == torch.float32
    assert set(b.tolist()) == set(float(v) for v in range(-5, 5)) and b.dtype == torch.float64


def test_randint_is_uniform_over_its_range():
    def f(x):
        return torch.randint(-5, 5, (20000,)) + x.long()

    a = uniorch.compile(f, target="interpret", fallback="error")(torch.zeros(1))
    counts = torch.bincount(a + 5, minlength=10)
    assert counts.numel() == 10 and counts.min() > 1700 and counts.max() < 2300, counts  # ~2000 each


def test_more_distributions_compile_with_the_right_statistics():
    def f(x):
        return (torch.empty_like(x).cauchy_(), torch.empty_like(x).log_normal_(0.5, 0.25),
                torch.empty_like(x).geometric_(0.25), torch.empty_like(x).exponential_(2.0),
                torch.empty_like(x).uniform_(-2.0, 3.0), torch.empty_like(x).normal_(1.0, 2.0),
                torch.nn.functional.rrelu(x - 0.5, 0.1, 0.3, training=True))

    x = torch.rand(200, 100)
    cm = uniorch.compile(f, target="interpret")
    assert not cm.explain(x).fallbacks
    c, ln, g, e, u, n, r = cm(x)
    assert abs(c.median()) < 0.05 and abs((c.abs() < 1).float().mean() - 0.5) < 0.02  # Cauchy(0, 1) quartiles at ±1
    assert abs(ln.log().mean() - 0.5) < 0.01 and abs(ln.log().std() - 0.25) < 0.01
    assert g.min() >= 1 and bool((g == g.round()).all()) and abs(g.mean() - 4) < 0.15
    assert e.min() >= 0 and abs(e.mean() - 0.5) < 0.02
    assert -2 <= u.min() and u.max() < 3 and abs(u.mean() - 0.5) < 0.05
    assert abs(n.mean() - 1) < 0.05 and abs(n.std() - 2) < 0.05
    neg = (x - 0.5) < 0
    slope = r[neg] / (x - 0.5)[neg]
    assert 0.1 - 1e-5 <= slope.min() and slope.max() <= 0.3 + 1e-5 and torch.equal(r[~neg], (x - 0.5)[~neg])
