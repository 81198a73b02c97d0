"""CUDA-graph replay of launch plans (runtime/cuda_graphs.py), its bookkeeping checked on the CPU:
a stand-in for torch's graph API records the plan's run at capture and, at each replay, runs it
again into the captured outputs, reading the captured inputs, as a real graph does. What is
checked: when it captures, which inputs are copied and which read in place, that outputs outlive
later calls, that a moved weight is captured again, and which plans are never graphed. Numerics
against eager on fresh inputs at every call."""
import torch
from torch import nn

import uniorch
from uniorch.runtime.cuda_graphs import GraphedPlan


class FakeGraphs:
    """Replays write into the captured outputs from the captured inputs, as a CUDA graph would."""

    def available(self):
        return True

    def accepts(self, t):
        return isinstance(t, torch.Tensor)

    def capture(self, run, pool):
        outs = run()
        return (run, outs), outs, pool

    def replay(self, graph):
        run, outs = graph
        for o, n in zip(outs, run()):
            o.copy_(n)


def _graphed(model, *args):
    cm = uniorch.compile(model, target="interpret", cuda_graphs=True)
    cm(*args)  # compiles; the first call runs the plan
    regions = [r for e in cm._cache.values() for r in e.program.regions]
    for r in regions:
        assert isinstance(r.graphs, GraphedPlan)
        r.graphs = GraphedPlan(r.plan, FakeGraphs())
    return cm, regions


def test_replays_compute_what_eager_does_and_outputs_outlive_later_calls():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval().requires_grad_(False)
    cm, (region,) = _graphed(model, torch.randn(4, 16))
    xs = [torch.randn(4, 16) for _ in range(4)]
    outs = [cm(x) for x in xs]
    g = region.graphs
    assert g.captures == 1 and g.replays == 3  # first call: the plan; then capture and replay
    for x, out in zip(xs, outs):  # earlier outputs are the caller's: later replays leave them alone
        torch.testing.assert_close(out, model(x))
    # the weights are read in place; the activation (a new tensor each call) is copied in
    copied = [not keep for keep in g.by_address]
    assert sum(copied) == 1, g.by_address


def test_a_reassigned_weight_is_captured_again():
    torch.manual_seed(1)
    model = nn.Linear(16, 8).eval().requires_grad_(False)
    x = torch.randn(4, 16)
    cm, (region,) = _graphed(model, x)
    cm(x), cm(x)
    model.weight = nn.Parameter(torch.randn(8, 16), requires_grad=False)
    torch.testing.assert_close(cm(x), model(x))
    assert region.graphs.captures == 2


def test_an_input_refilled_in_place_is_read_where_it_is():
    torch.manual_seed(2)
    model = nn.Linear(16, 8).eval().requires_grad_(False)
    x = torch.randn(4, 16)
    cm, (region,) = _graphed(model, x)
    cm(x)
    x.copy_(torch.randn(4, 16))  # the same tensor, new values: no copy needed, still current
    torch.testing.assert_close(cm(x), model(x))
    assert all(region.graphs.by_address)


def test_random_ops_are_never_graphed():
    def noisy(x):
        return x * 2 + torch.rand_like(x)

    x = torch.randn(64)
    cm = uniorch.compile(noisy, target="interpret", cuda_graphs=True)
    cm(x)
    (region,) = [r for e in cm._cache.values() for r in e.program.regions]
    assert region.graphs.why_not and "random" in region.graphs.why_not
    g = region.graphs = GraphedPlan(region.plan, FakeGraphs())
    a, b = cm(x), cm(x)
    assert g.captures == 0 and not torch.equal(a, b)  # fresh numbers at every call


def test_off_by_default_and_nothing_changes_without_a_gpu():
    model = nn.Linear(4, 4).eval().requires_grad_(False)
    x = torch.randn(2, 4)
    cm = uniorch.compile(model, target="interpret")
    cm(x)
    assert all(r.graphs is None for e in cm._cache.values() for r in e.program.regions)
    cm = uniorch.compile(model, target="interpret", cuda_graphs=True)
    for _ in range(3):
        torch.testing.assert_close(cm(x), model(x))
    (region,) = [r for e in cm._cache.values() for r in e.program.regions]
    assert region.graphs.captures == 0  # no CUDA here: the plan runs as usual


def test_torch_compile_reduce_overhead_means_cuda_graphs():
    from uniorch.api import torch_backend

    def f(x):
        return (x * 2).relu()

    gm = torch.fx.symbolic_trace(f)
    x = torch.randn(8)
    for kwargs, want in [({"mode": "reduce-overhead"}, True), ({}, False),
                         ({"options": {"cuda_graphs": True}}, True)]:
        cm = torch_backend(gm, [x], **{**kwargs, "options": {**kwargs.get("options", {}), "target": "interpret"}})
        assert cm._cuda_graphs is want, kwargs
        torch.testing.assert_close(cm(x)[0] if isinstance(cm(x), tuple) else cm(x), f(x))


def test_a_failed_capture_falls_back_to_plain_launches():
    class Refusing(FakeGraphs):
        def capture(self, run, pool):
            raise RuntimeError("operation not permitted when stream is capturing")

    torch.manual_seed(3)
    model = nn.Linear(16, 8).eval().requires_grad_(False)
    cm, (region,) = _graphed(model, torch.randn(4, 16))
    region.graphs = GraphedPlan(region.plan, Refusing())
    for _ in range(3):
        x = torch.randn(4, 16)
        torch.testing.assert_close(cm(x), model(x))
    assert "capture failed" in region.graphs.why_not and region.graphs.captures == 0
