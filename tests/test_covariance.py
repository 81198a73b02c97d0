"""torch.cov and torch.corrcoef compiled (capture/covariance.py): ATen's kernel reads values as it
goes (degrees of freedom, weight checks), so a model calling either ran whole in PyTorch. Numerics
against eager on fresh random inputs; weights eager refuses are refused the same way."""
import warnings

import pytest
import torch

import uniorch
from uniorch.capture.covariance import TABLE

aten = torch.ops.aten


def _compiled(fn, *args):
    cm = uniorch.compile(fn, target="interpret")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ATen's degrees-of-freedom warning, where a case asks for it
        got = cm(*args)
        want = fn(*args)
    assert cm.explain(*args).fallbacks == []
    return got, want


def _close(got, want, dtype):
    tol = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 2e-2, torch.float16: 2e-3}.get(dtype, 1e-5)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, atol=tol, rtol=tol, equal_nan=True)


CASES = [(dtype, shape, 1) for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int64)
         for shape in ((4, 10), (11,), (1, 5), (3, 1))]
CASES += [(torch.float32, shape, c) for shape in ((4, 10), (3, 1)) for c in (0, 2)]  # (3, 1) with 2: no freedom


@pytest.mark.parametrize("dtype, shape, correction", CASES)
def test_cov_matches_eager(dtype, shape, correction):
    x = (torch.randn(shape) * 3).to(dtype) if dtype != torch.int64 else torch.randint(-5, 9, shape)
    got, want = _compiled(lambda x: torch.cov(x, correction=correction), x)
    _close(got, want, dtype)


def test_cov_with_frequency_and_importance_weights():
    x, fw, aw = torch.randn(3, 12), torch.randint(0, 5, (12,)), torch.rand(12)
    for fn, args in [(lambda x, f: torch.cov(x, fweights=f), (x, fw)),
                     (lambda x, a: torch.cov(x, aweights=a, correction=2), (x, aw)),
                     (lambda x, f, a: torch.cov(x, correction=0, fweights=f, aweights=a), (x, fw, aw)),
                     (lambda x, f, a: torch.cov(x, fweights=f, aweights=a), (x, fw, aw))]:
        got, want = _compiled(fn, *args)
        _close(got, want, torch.float32)


@pytest.mark.parametrize("weights, message", [
    (lambda n: (torch.arange(n) - 2, None), "fweights cannot be negative"),
    # one weight always negative: a draw of all-positive weights made this flaky
    (lambda n: (None, torch.rand(n).index_fill(0, torch.tensor([1]), -0.25)), "aweights cannot be negative"),
    (lambda n: (torch.zeros(n, dtype=torch.long), None), "weights sum to zero"),
])
def test_weights_eager_refuses_are_refused(weights, message):
    x = torch.randn(2, 6)
    fw, aw = weights(6)
    cm = uniorch.compile(lambda x, f, a: torch.cov(x, fweights=f, aweights=a), target="interpret")
    with pytest.raises(RuntimeError, match=message):
        torch.cov(x, fweights=fw, aweights=aw)
    with pytest.raises(RuntimeError, match=message):
        cm(x, fw, aw)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_corrcoef_matches_eager(dtype):
    x = torch.randn(5, 9, dtype=dtype)
    x[2] = 1.5  # a constant variable: eager's NaN row and column
    got, want = _compiled(torch.corrcoef, x)
    _close(got, want, dtype)
    got, want = _compiled(torch.corrcoef, torch.randn(7, dtype=dtype))  # one variable: 1
    _close(got, want, dtype)


def test_covariance_regulariser_in_a_model_is_kernels():
    """A VICReg-style covariance penalty on a projection: compiled whole, gradients included."""
    torch.manual_seed(0)
    proj = torch.nn.Linear(6, 4)

    def loss(z):
        c = torch.cov(proj(z).t())
        off = c - torch.diag(torch.diagonal(c))
        return (off ** 2).sum() / 4 + torch.corrcoef(proj(z).t()).abs().mean()

    z = torch.randn(16, 6)
    got, want = _compiled(loss, z)
    _close(got, want, torch.float32)
    graph = uniorch.capture(loss, (z,)).graph_module.graph
    assert not [n for n in graph.nodes if n.op == "call_function" and n.target in TABLE]


def test_atens_kernels_are_back_after_capture():
    key = torch._C.DispatchKey.CompositeImplicitAutograd
    before = {op: op.py_kernels.get(key) for op in TABLE}
    uniorch.capture(torch.cov, (torch.randn(3, 4),))
    assert {op: op.py_kernels.get(key) for op in TABLE} == before
    with pytest.raises(RuntimeError, match="fweights cannot be negative"):  # ATen's own check, eagerly
        torch.cov(torch.randn(2, 3), fweights=torch.tensor([1, -1, 2]))


@pytest.mark.parametrize("weighted", [False, True])
def test_a_covariance_penalty_trains_compiled_like_eager(weighted):
    """Training goes through Dynamo and AOTAutograd, which ran ATen's kernel too: a graph break at
    every torch.cov, the covariance computed eagerly between two compiled pieces. Weighted, it still
    is (its weight checks cannot leave AOTAutograd's forward yet), and explain says so."""
    import copy

    torch.manual_seed(0)

    class Whitened(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(6, 4)

        def forward(self, z, w):
            h = self.proj(z)
            c = torch.cov(h.t(), aweights=w) if weighted else torch.cov(h.t())
            return ((c - torch.diag(torch.diagonal(c))) ** 2).sum() + h.square().mean()

    model = Whitened().train()
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    z, w = torch.randn(16, 6), torch.rand(16)
    cm(z, w).backward()
    ref(z, w).backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5)
    rep = cm.explain(z, w)
    assert not rep.fallbacks and rep.backward is not None and rep.backward.kernels, str(rep)
    assert bool(rep.graph_breaks) == weighted, str(rep)
