"""The cpu target compiles a graph's kernels ahead in worker processes (backends/cpu/compile_pool.py):
its own loading then finds every kernel compiled and linked, and the model matches eager. A worker
that dies, or none at all, leaves the kernels to the serial compile, with the same results."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import uniorch
from uniorch.backends.cpu import compile_pool, forget_compiled, launch, object_cache

from adapter_util import needs_adapter

pytestmark = needs_adapter


class Net(torch.nn.Module):
    """Six kernels of different kinds: convolution with ReLU, pooling, a second convolution, a
    mean, a linear layer, a softmax."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 16, 3)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.c1(x)), 2)
        y = torch.tanh(self.c2(y)).mean((2, 3))
        return torch.softmax(self.fc(y) * 3, -1)


def _fresh(monkeypatch, tmp_path, workers: str):
    monkeypatch.setenv("UNIORCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("UNIORCH_COMPILE_WORKERS", workers)
    forget_compiled()
    launch._engines.clear()
    launch.compiled_by.clear()


def _check(seed: int):
    model = Net()
    torch.manual_seed(seed)
    x = torch.randn(2, 3, 12, 12)
    cm = uniorch.compile(model, target="cpu")
    torch.testing.assert_close(cm(x), model(x), rtol=1e-5, atol=1e-6)
    rep = cm.explain()
    assert not rep.fallbacks and not any(k.note for k in rep.kernels), str(rep)
    return len(rep.kernels)


def test_workers_compile_every_kernel_ahead(tmp_path, monkeypatch):
    """Twice, in two cache folders: the workers started for the first (or by an earlier test) must
    compile into the folder of the compile they serve."""
    if object_cache._compiler() is None:
        pytest.skip("no C compiler to link kernels with")
    sent = []
    ahead = compile_pool.compile_ahead
    monkeypatch.setattr(compile_pool, "compile_ahead", lambda s, b: sent.append(ahead(s, b)) or sent[-1])
    for k, folder in enumerate(("one", "two")):
        _fresh(monkeypatch, tmp_path / folder, "2")
        sent.clear()
        n = _check(1 + k)
        assert n >= compile_pool.MIN_KERNELS and sent == [n]
        # every kernel came from a worker's library: none compiled by this process's engine
        assert launch.compiled_by["library"] == n and not launch.compiled_by["engine"], (folder, launch.compiled_by)


def test_a_worker_that_dies_leaves_its_kernels_to_the_serial_compile(tmp_path, monkeypatch):
    _fresh(monkeypatch, tmp_path, "2")
    dead = [subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            for _ in range(2)]
    monkeypatch.setattr(compile_pool, "_workers", lambda n, backend: dead[:n])
    n = _check(2)
    assert launch.compiled_by["engine"] == n and not launch.compiled_by["library"], launch.compiled_by


def test_no_workers_compiles_in_process(tmp_path, monkeypatch):
    _fresh(monkeypatch, tmp_path, "0")
    started = []
    monkeypatch.setattr(compile_pool, "_workers", lambda n, backend: started.append(n) or [])
    n = _check(3)
    assert not started and launch.compiled_by["engine"] == n


def test_a_malformed_worker_count_is_named(monkeypatch):
    monkeypatch.setenv("UNIORCH_COMPILE_WORKERS", "many")
    with pytest.raises(ValueError, match="UNIORCH_COMPILE_WORKERS='many'"):
        compile_pool.workers()
