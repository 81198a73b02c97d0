"""Bound launches (runtime/bound_launch.py, backends/triton_launch.py `bind`), without a GPU.

Each kernel of a model compiled for the interpreter is given a TritonLauncher over a stand-in for
a GPU JITFunction whose compiled kernel's launcher runs the interpreted kernel with exactly the
arguments it is handed: what Triton's launcher gets, tensors, strides and constexprs in signature
order. So a bound launch that passed a stride of the wrong tensor, or kept an input's strides for
a call whose input has others, gives a wrong answer, judged against eager on fresh inputs."""
import gc

import pytest
import torch
from torch import nn

import uniorch
from uniorch.backends import triton_launch
from uniorch.backends.triton_launch import TritonLauncher
from uniorch.runtime import loader
from uniorch.runtime.plan import LaunchPlan


class _Active:
    """A GPU driver as Triton's launch path sees it."""

    def get_current_device(self):
        return 0

    def get_current_stream(self, device):
        return 0

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)


class _Compiled:
    """A compiled kernel whose launcher runs the interpreted kernel with the arguments given."""

    function, packed_metadata = "function", "metadata"

    def __init__(self, ks, interpreted, counts):
        self.ks, self.interpreted, self.counts = ks, interpreted, counts

    def _init_handles(self):
        pass

    def __getitem__(self, grid):  # Triton's own path through the compiled kernel (a hook is set)
        def launch(*args):
            self.counts["own"] += 1
            self._interpret(grid, args)
        return launch

    def run(self, g0, g1, g2, stream, function, packed, hook_meta, enter, exit_, *args):
        self.counts["run"] += 1
        self._interpret((g0, g1, g2), args)

    def _interpret(self, grid, args):
        ks = self.ks
        runtime = args[:len(args) - len(ks.constexprs)]
        tail = args[len(runtime):]
        assert tuple(tail) == triton_launch.constexpr_tail(self.interpreted, ks)
        self.interpreted[grid](*runtime, **ks.constexprs, num_warps=ks.num_warps,
                                       num_stages=ks.num_stages)


class _Jit:
    """What TritonLauncher's direct path reads of a JITFunction, with Triton's own path (the first
    launch of each specialization) running the interpreted kernel."""

    device_caches = {}

    def __init__(self, ks, interpreted, counts):
        self.ks, self.interpreted, self.counts = ks, interpreted, counts
        self.arg_names = interpreted.arg_names

    def __getitem__(self, grid):
        def launch(*args, num_warps=None, num_stages=None, **constexprs):
            self.counts["triton"] += 1
            self.interpreted[grid](*args, **constexprs, num_warps=num_warps, num_stages=num_stages)
            return _Compiled(self.ks, self.interpreted, self.counts)
        return launch


@pytest.fixture
def gpu_launch_path(monkeypatch):
    """(model, args) -> compiled model whose kernels launch as on a GPU, and launch counts."""
    from triton.runtime.driver import driver

    monkeypatch.setattr(driver, "_active", _Active())
    counts = {"run": 0, "triton": 0, "own": 0}

    def compile_(model, args):
        cm = uniorch.compile(model, target="interpret")
        with torch.no_grad():
            cm(*args)  # compiled, trial-launched and run once on the interpreter's launcher
        plans = [r.plan for e in cm._cache.values() for r in e.program.regions]
        assert plans
        for plan in plans:
            for k in plan.kernels.values():
                interpreted = loader.load(k.source, interpret=True)
                k.fn = TritonLauncher(k.source, _Jit(k.source, interpreted, counts))
                assert k.fn._specialize is not None, "the direct path is not in use"
        return cm, plans

    return compile_, counts


class Block(nn.Module):
    """Views, slices, a transpose, a norm's parameters, attention, an MLP."""

    def __init__(self, d=32, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 64), nn.GELU(), nn.Linear(64, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).split(d, dim=-1)
        q, k, v = (y.view(b, t, self.heads, -1).transpose(1, 2) for y in (q, k, v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(x), x[:, 1:].sum(-1)


def _check(cm, model, args):
    with torch.no_grad():
        got, want = cm(*args), model(*args)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def _bound_block(compile_, seed):
    """A Block compiled on the GPU launch path, called twice: recorded, then bound."""
    torch.manual_seed(seed)
    model = Block().eval()
    cm, plans = compile_(model, (torch.randn(2, 12, 32),))
    for _ in range(2):
        _check(cm, model, (torch.randn(2, 12, 32),))
    return model, cm, plans


def test_bound_launches_compute_what_eager_does(gpu_launch_path):
    compile_, counts = gpu_launch_path
    torch.manual_seed(0)
    model = Block().eval()
    cm, plans = compile_(model, (torch.randn(2, 12, 32),))
    launches = sum(len(p.launches) for p in plans)
    for call in range(4):  # the first records and binds; later calls run bound
        _check(cm, model, (torch.randn(2, 12, 32),))
    assert all(p.bound.by_signature for p in plans)
    # and each call of the signature ran as straight-line code (runtime/plan_code.py)
    assert all(code is not None for p in plans for _, _, code in p.bound.by_signature.values())
    # every launch after the first call of the signature went through a bound launch: the
    # launcher ran (4 calls x launches) times, Triton's own path only at each key's first launch
    assert counts["run"] + counts["triton"] == 4 * launches
    assert counts["triton"] <= launches


def test_later_calls_build_no_argument_list(gpu_launch_path, monkeypatch):
    compile_, counts = gpu_launch_path
    model, cm, plans = _bound_block(compile_, 4)

    def refused(*a, **k):
        raise AssertionError("a launch went through TritonLauncher.__call__")

    monkeypatch.setattr(TritonLauncher, "__call__", refused)
    for _ in range(2):
        _check(cm, model, (torch.randn(2, 12, 32),))


def test_an_input_with_other_strides_binds_again(gpu_launch_path):
    compile_, counts = gpu_launch_path
    model, cm, plans = _bound_block(compile_, 1)
    # the same shape, transposed in memory, and one starting 4 bytes into its storage: each
    # a signature of its own, each computed as eager
    wide = torch.randn(2, 32, 12).transpose(1, 2)
    shifted = torch.randn(2 * 12 * 32 + 1)[1:].view(2, 12, 32)
    for x in (wide, shifted, wide, torch.randn(2, 12, 32)):
        _check(cm, model, (x,))
    assert max(len(p.bound.by_signature) for p in plans) == 3


def test_in_place_state_updates_stay_right(gpu_launch_path):
    """BatchNorm in training mode writes its running statistics into its buffers in place."""
    compile_, counts = gpu_launch_path
    torch.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).train()
    ref = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).train()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 10, 10)
    cm, plans = compile_(model, (x,))
    ref(x)  # the compile's first call updated the statistics once
    for _ in range(3):
        x = torch.randn(2, 3, 10, 10)
        with torch.no_grad():
            got, want = cm(x), ref(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model[1].running_mean, ref[1].running_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model[1].running_var, ref[1].running_var, rtol=1e-5, atol=1e-6)


def test_a_launch_hook_takes_tritons_path(gpu_launch_path, monkeypatch):
    """A profiler's launch hook must see every launch: bound launches stand aside while one is set."""
    from triton import knobs

    compile_, counts = gpu_launch_path
    model, cm, plans = _bound_block(compile_, 3)
    seen = []
    hook = lambda *a: seen.append(a)  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        before = counts["run"]
        _check(cm, model, (torch.randn(2, 12, 32),))
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert counts["run"] == before and counts["own"] > 0  # Triton's own path, which calls the hooks


def test_random_ops_draw_new_seeds_each_call(gpu_launch_path):
    """A plan with random ops appends a seed tensor drawn per call to its inputs: the written-out
    call must take each call's."""
    compile_, counts = gpu_launch_path
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.5)).train()
    x = torch.randn(32, 16)
    cm, plans = compile_(model, (x,))
    with torch.no_grad():
        outs = [cm(x) for _ in range(4)]
        dense = torch.nn.functional.linear(x, model[0].weight, model[0].bias) * 2
    assert all(p.bound.by_signature for p in plans)
    for out in outs:
        kept = out != 0
        assert 0.4 < kept.float().mean() < 0.6
        torch.testing.assert_close(out[kept], dense[kept], rtol=1e-5, atol=1e-6)
    assert not torch.equal(outs[-1] != 0, outs[-2] != 0)  # a new mask per call


def test_plan_code_keeps_the_steps_decisions():
    """The written-out call takes a view where the recorded input was contiguous, a reshape where
    not, and writes into an input only where the recorded call did."""
    from uniorch.runtime.plan_code import make_call

    class Kern:
        launches = 0

    calls = []
    trace = [("view", 0, 2, (4, 2), "reshape"),
             ("launch", 0, Kern, [2, 1], [3, 4], {}, [("alloc", lambda ctx: torch.zeros(8)), ("into", 1)], {1: 1})]
    code = make_call(trace, 2, 2, [3, 4], [lambda stream, *t: calls.append((stream, t))])
    assert code is not None and "s0.reshape(" in code.source and "r0_1 = s1" in code.source

    class Ctx:
        launch = None

    x, y = torch.randn(2, 4).t(), torch.randn(8)
    out, written = code([x, y], Ctx(), 7)
    assert written is y and calls[0][0] == 7 and calls[0][1][0].shape == (4, 2) and Kern.launches == 1
    assert make_call(trace[:1], 2, 2, [3, 4], [None]) is None  # a step without a trace entry


def test_relayout_copies_in_the_written_out_call(gpu_launch_path):
    """Exact fp32 matmuls on a GPU read their weight N-major: the plan copies it so at every call
    (KernelSource.relayout). The kernels here are the sm_90 ones, run on Triton's interpreter."""
    from uniorch.codegen import generate

    compile_, counts = gpu_launch_path
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(64, 96), nn.Tanh(), nn.Linear(96, 48)).eval()
    x = torch.randn(256, 64)
    cm, plans = compile_(model, (x,))
    for plan in plans:
        for k in plan.kernels.values():
            gpu = generate(k.func_op, "cuda:sm_90")
            k.source, k.fn = gpu, TritonLauncher(gpu, _Jit(gpu, loader.load(gpu, interpret=True), counts))
    assert any(k.source.relayout for p in plans for k in p.kernels.values())
    for _ in range(3):
        x = torch.randn(256, 64)
        with torch.no_grad():
            torch.testing.assert_close(cm(x), model(x), rtol=1e-5, atol=1e-5)
    codes = [code for p in plans for _, _, code in p.bound.by_signature.values()]
    assert codes and all(code is not None for code in codes)
    assert any("relaid(" in code.source for code in codes)


def test_training_steps_with_a_compiled_optimizer(gpu_launch_path):
    """Forward and backward halves and AdamW's step (its states written in place, runtime/inplace.py)
    through bound launches and written-out calls, three steps against eager's."""
    import copy

    compile_, counts = gpu_launch_path
    torch.manual_seed(7)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 8)).train()
    ref = copy.deepcopy(model)
    opt, ref_opt = torch.optim.AdamW(model.parameters(), lr=1e-2), torch.optim.AdamW(ref.parameters(), lr=1e-2)
    cm, copt = uniorch.compile(model, target="interpret"), uniorch.compile(opt, target="interpret")
    data = [(torch.randn(24, 16), torch.randn(24, 8)) for _ in range(5)]

    def step(f, o, x, y):
        o.zero_grad(set_to_none=True)
        loss = (f(x) - y).pow(2).mean()
        loss.backward()
        o.step()
        return loss.detach()

    before = {id(o) for o in gc.get_objects() if type(o) is LaunchPlan}
    step(cm, copt, *data[0])
    step(ref, ref_opt, *data[0])
    plans = [o for o in gc.get_objects() if type(o) is LaunchPlan and id(o) not in before]
    for plan in plans:
        for k in plan.kernels.values():
            k.fn = TritonLauncher(k.source, _Jit(k.source, loader.load(k.source, interpret=True), counts))
    for x, y in data[1:]:
        torch.testing.assert_close(step(cm, copt, x, y), step(ref, ref_opt, x, y), rtol=1e-5, atol=1e-6)
    for p, r in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-6)
    codes = [code for p in plans if p.bound is not None for _, _, code in p.bound.by_signature.values()]
    assert len(codes) >= 3 and all(code is not None for code in codes)  # forward, backward, optimizer


def test_another_current_device_takes_the_usual_path(gpu_launch_path, monkeypatch):
    """A bound launch's kernel is loaded on the device current when it was bound: with another
    current device the call goes the usual way (Triton's key includes the current device)."""
    compile_, counts = gpu_launch_path
    model, cm, plans = _bound_block(compile_, 8)
    from triton.runtime.driver import driver

    usual = []
    call = TritonLauncher.__call__
    monkeypatch.setattr(TritonLauncher, "__call__", lambda self, *a: usual.append(1) or call(self, *a))
    _check(cm, model, (torch.randn(2, 12, 32),))
    assert not usual  # bound: the launcher's own path is not taken
    monkeypatch.setattr(type(driver._active), "get_current_device", lambda self: 1)
    _check(cm, model, (torch.randn(2, 12, 32),))
    assert len(usual) == sum(len(p.launches) for p in plans)  # every launch the usual way


def test_a_launch_that_cannot_be_bound_goes_the_usual_way(gpu_launch_path, monkeypatch):
    """Binding happens after a call that succeeded: a launcher refusing it must not fail the call."""
    compile_, counts = gpu_launch_path
    torch.manual_seed(9)
    model = Block().eval()
    cm, plans = compile_(model, (torch.randn(2, 12, 32),))

    def refuse(self, inputs, outputs):
        raise RuntimeError("cannot bind")

    monkeypatch.setattr(TritonLauncher, "bind", refuse)
    for _ in range(3):
        _check(cm, model, (torch.randn(2, 12, 32),))
    assert all(not p.bound.by_signature for p in plans)
