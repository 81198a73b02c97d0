"""Kernels compiled all at once before the trial launch (runtime/compiler.py `_compile_ahead`):
the plan runs once with every launch replaced by the launcher's `warmup`, under Triton's
AsyncCompileMode, so Triton's compiles share a thread pool instead of running in turn. Without a
GPU, the plan's side is checked: every kernel is warmed once with the arguments its launch would
get, none is launched, and the plan's launch is restored."""
import torch
from torch import nn

import uniorch
from uniorch.runtime.compiler import _compile_ahead


class _Recorder:
    def __init__(self, real, log, name):
        self.real, self.log, self.name = real, log, name

    def warmup(self, inputs, outputs, sizes=None):
        self.log.append((self.name, [tuple(t.shape) for t in inputs], [tuple(t.shape) for t in outputs]))

    def __call__(self, inputs, outputs, sizes=None):
        raise AssertionError(f"{self.name} launched while compiling ahead")


def test_every_kernel_is_warmed_once_and_none_launched():
    torch.manual_seed(0)
    model = nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 300), nn.GELU(), nn.Linear(300, 32), nn.Softmax(-1)).eval()
    model.requires_grad_(False)
    x = torch.randn(8, 32)
    cm = uniorch.compile(model, target="interpret")
    ref = model(x)
    torch.testing.assert_close(cm(x), ref)
    program = next(iter(cm._cache.values())).program
    (region,) = program.regions
    (wrapper,) = [m for m in program.module.children() if getattr(m, "compiled", None) is region]
    inputs = [torch.randn(tuple(n.meta["val"].shape)) for n in wrapper.eager.graph.nodes if n.op == "placeholder"]
    plan = region.plan
    assert len(plan.kernels) >= 2
    log, real = [], {}
    for name, k in plan.kernels.items():
        real[name] = k.fn
        k.fn = _Recorder(k.fn, log, name)
    launch = plan.launch
    _compile_ahead(plan, inputs, workers=2)
    assert plan.launch is launch
    assert sorted(n for n, _, _ in log) == sorted(plan.kernels), log
    for name, k in plan.kernels.items():
        k.fn = real[name]
    torch.testing.assert_close(cm(x), ref)


def test_relayout_copies_are_compiled_ahead_not_run(monkeypatch):
    """A kernel whose input the plan lays out anew (KernelSource.relayout) gets the copy's compile
    queued with the kernels' (runtime/relayout.py `relaid(..., warmup=True)`); a real call runs it."""
    import uniorch.runtime.plan as plan_mod

    model = nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 300), nn.GELU(), nn.Linear(300, 32), nn.Softmax(-1))
    model.eval().requires_grad_(False)
    x = torch.randn(8, 32)
    cm = uniorch.compile(model, target="interpret")
    cm(x)
    program = next(iter(cm._cache.values())).program
    (region,) = program.regions
    (wrapper,) = [m for m in program.module.children() if getattr(m, "compiled", None) is region]
    inputs = [torch.randn(tuple(n.meta["val"].shape)) for n in wrapper.eager.graph.nodes if n.op == "placeholder"]
    plan, log = region.plan, []
    for name, k in plan.kernels.items():
        k.fn = _Recorder(k.fn, log, name)
    _compile_ahead(plan, inputs, workers=2)
    name, i = next((n, i) for n, ins, _ in log for i, s in enumerate(ins) if len(s) == 2 and min(s) > 1)
    plan.kernels[name].source.relayout = [(i, [1, 0])]
    calls = []

    def recording(t, order, warmup=False):
        calls.append(warmup)
        return t.permute(order).contiguous().permute([order.index(d) for d in range(len(order))])

    monkeypatch.setattr(plan_mod, "relaid", recording)
    _compile_ahead(plan, inputs, workers=2)
    assert calls == [True]


def test_tritons_async_compile_is_there():
    from triton.runtime._async_compile import AsyncCompileMode  # noqa: F401 - 3.6 and newer


def test_each_compile_worker_also_builds_the_kernels_launcher(monkeypatch):
    """Triton 3.6 compiles a C launcher per kernel signature when a kernel first runs (0.2 to 0.3 s
    each with the host's C compiler), in turn, at the trial launch. The compile pool's workers build
    it right after the kernel, as the first launch will (`launcher_cls(src, metadata)`, which lands
    in Triton's cache); a launcher that fails to build leaves the compiled kernel as it is."""
    import inspect
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from triton.compiler.compiler import CompiledKernel
    from triton.runtime.driver import driver

    from uniorch.runtime.compiler import _WithLaunchers

    # what the first launch builds, in this Triton: the same call with the same arguments
    assert "launcher_cls(self.src, self.metadata)" in inspect.getsource(CompiledKernel._init_handles)

    class Kernel:
        def __init__(self, n):
            self.src, self.metadata = f"src{n}", f"meta{n}"

    built, barrier = [], threading.Barrier(2, timeout=10)

    class Driver:
        def launcher_cls(self, src, metadata):
            barrier.wait()  # both workers build at once
            built.append((src, metadata, threading.current_thread().name))
            if src == "src1":
                raise RuntimeError("no C compiler")

    monkeypatch.setattr(driver, "_active", Driver())
    with ThreadPoolExecutor(2) as pool:
        futures = [_WithLaunchers(pool).submit(lambda n=n: Kernel(n)) for n in range(2)]
        kernels = [f.result() for f in futures]
    assert [k.src for k in kernels] == ["src0", "src1"]
    assert sorted((s, m) for s, m, _ in built) == [("src0", "meta0"), ("src1", "meta1")]
    assert all(t != threading.current_thread().name for _, _, t in built)
