"""compile_aot runs the backend's stages for several kernels at once where the backend allows it
(`Backend.compiles_in_threads`: Triton's GPU backends), and the bundle is the one a kernel-by-
kernel compile makes; a backend that does not opt in compiles on the calling thread."""
from __future__ import annotations

import threading

import torch
from torch import nn

import uniorch
import uniorch.backends.driver as driver
from uniorch.targets import parse_target


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32), nn.Softmax(-1)).eval()


def _threads_compiling(monkeypatch) -> list:
    """The names of the threads that run driver.compile_kernel from now on, one per call."""
    seen: list = []
    real = driver.compile_kernel

    def recording(*a, **k):
        seen.append(threading.current_thread().name)
        return real(*a, **k)

    monkeypatch.setattr(driver, "compile_kernel", recording)
    return seen


def _compile(monkeypatch, tmp_path, target: str, threads: bool):
    monkeypatch.setenv("UNIORCH_CACHE_DIR", str(tmp_path / ("threads" if threads else "one")))
    monkeypatch.setattr(type(parse_target(target).backend), "compiles_in_threads", threads)
    seen = _threads_compiling(monkeypatch)
    with torch.no_grad():
        art = uniorch.compile_aot(_model(), (torch.randn(16, 32),), target=target)
    monkeypatch.undo()
    return art, seen


def test_gpu_kernels_compile_in_threads_into_the_same_bundle(monkeypatch, tmp_path):
    one, seen_one = _compile(monkeypatch, tmp_path, "cuda:sm_90", threads=False)
    many, seen_many = _compile(monkeypatch, tmp_path, "cuda:sm_90", threads=True)
    assert set(seen_one) == {threading.current_thread().name}
    assert len(set(seen_many) - {threading.current_thread().name}) >= 2, seen_many
    assert [k.name for k in one.kernels] == [k.name for k in many.kernels] and len(one.kernels) >= 2
    for a, b in zip(one.kernels, many.kernels):
        assert a.asm["ptx"] == b.asm["ptx"] and a.asm["cubin"] == b.asm["cubin"], a.name
        sa, sb = a.specialized, b.specialized
        assert (sa is None) == (sb is None) and (sa is None or sa.asm["ptx"] == sb.asm["ptx"]), a.name


def test_a_backend_that_does_not_opt_in_compiles_on_the_calling_thread(monkeypatch, tmp_path):
    assert not type(parse_target("cpu").backend).compiles_in_threads
    monkeypatch.setenv("UNIORCH_CACHE_DIR", str(tmp_path))
    seen = _threads_compiling(monkeypatch)
    with torch.no_grad():
        art = uniorch.compile_aot(_model(), (torch.randn(16, 32),), target="cpu")
    assert len(art.kernels) >= 2 and set(seen) == {threading.current_thread().name}


def test_threads_loading_one_kernel_source_all_get_its_function(tmp_path, monkeypatch):
    """A kernel's generic and specialized compiles load the same source, and compile_aot runs them
    in threads: a module is in sys.modules before its code has run, so a second thread took it
    half-made (`module ... has no attribute 'k0_attention'`, seen compiling the benchmark's
    attention row for sm_90). The module's source sleeps while it is made, which widened that
    window to every run."""
    import uuid
    from concurrent.futures import ThreadPoolExecutor

    from uniorch.codegen.source import KernelSource
    from uniorch.runtime import loader

    monkeypatch.setenv("UNIORCH_CACHE_DIR", str(tmp_path))
    tag = uuid.uuid4().hex[:8]
    ks = KernelSource(name=f"k_{tag}", fn_name=f"k_{tag}", input_ranks=[], output_ranks=[], grid=(1,),
                      source=f"import time\ntime.sleep(0.2)\n\n\n@jit\ndef k_{tag}(x):\n    pass\n")
    barrier = threading.Barrier(4, timeout=30)

    def load(_):
        barrier.wait()
        return loader.load(ks, interpret=True)

    with ThreadPoolExecutor(4) as pool:
        fns = list(pool.map(load, range(4)))
    assert len({id(f) for f in fns}) == 1
