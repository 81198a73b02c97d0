"""The cpu target's compiled kernels kept on disk as shared libraries (backends/cpu/object_cache.py):
a later process loads them instead of compiling with MLIR's engine, and its results are eager's.
A damaged library, or no C compiler to link one, costs only the compile."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import uniorch
from uniorch.backends.cpu import forget_compiled, launch, object_cache

from adapter_util import needs_adapter
from conftest import REPO

pytestmark = needs_adapter

# a matmul with a bias and GELU, a LayerNorm's row statistics, a softmax: three kinds of kernel
MODEL = """
import torch
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(24, 40)
        self.norm = torch.nn.LayerNorm(40)
    def forward(self, x):
        return torch.softmax(self.norm(torch.nn.functional.gelu(self.lin(x))), -1)
"""


def _block():
    scope: dict = {}
    exec(MODEL, scope)
    return scope["Block"]()


def _fresh_process_state():
    """As a new process finds it: no kernel compiled or loaded yet (the disk caches stay)."""
    forget_compiled()
    launch._engines.clear()
    launch.compiled_by.clear()


def _run_and_check(model, seed: int):
    torch.manual_seed(seed)
    x = torch.randn(5, 24)
    got = uniorch.compile(model, target="cpu")(x)
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)


def test_a_later_process_loads_the_linked_kernels(tmp_path, monkeypatch):
    if object_cache._compiler() is None:
        pytest.skip("no C compiler to link kernels with")
    monkeypatch.setenv("UNIORCH_CACHE_DIR", str(tmp_path))
    _fresh_process_state()
    _run_and_check(_block(), 1)
    object_cache.wait()
    made = launch.compiled_by["engine"]
    libs = [f for f in os.listdir(object_cache.folder()) if f.endswith(".so")]
    assert made >= 2 and len(libs) == made, (made, libs)
    script = MODEL + """
import json, torch, uniorch
from uniorch.backends.cpu import launch
m = Block(); torch.manual_seed(7); x = torch.randn(5, 24)  # the shapes compiled above
err = (uniorch.compile(m, target="cpu")(x) - m(x)).abs().max().item()
print(json.dumps({"err": err, **launch.compiled_by}))
"""
    env = dict(os.environ, UNIORCH_CACHE_DIR=str(tmp_path), PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    later = json.loads(out.stdout.strip().splitlines()[-1])
    assert later.get("engine", 0) == 0 and later["library"] == made, later
    assert later["err"] < 1e-5, later


def test_a_damaged_library_is_compiled_again_and_replaced(tmp_path, monkeypatch):
    if object_cache._compiler() is None:
        pytest.skip("no C compiler to link kernels with")
    monkeypatch.setenv("UNIORCH_CACHE_DIR", str(tmp_path))
    _fresh_process_state()
    model = _block()
    _run_and_check(model, 2)
    object_cache.wait()
    libs = sorted(f for f in os.listdir(object_cache.folder()) if f.endswith(".so"))
    assert libs
    for f in libs:  # cut short, as by a full disk
        path = os.path.join(object_cache.folder(), f)
        with open(path, "r+b") as fh:
            fh.truncate(100)
    _fresh_process_state()
    _run_and_check(model, 3)
    assert launch.compiled_by["engine"] == len(libs) and not launch.compiled_by["library"]
    object_cache.wait()
    assert all(os.path.getsize(os.path.join(object_cache.folder(), f)) > 100 for f in libs)
    _fresh_process_state()
    _run_and_check(model, 4)
    assert launch.compiled_by["library"] == len(libs) and not launch.compiled_by["engine"]


def test_without_a_c_compiler_kernels_are_compiled_each_time(tmp_path, monkeypatch):
    monkeypatch.setenv("UNIORCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(object_cache, "_compiler", lambda: None)
    _fresh_process_state()
    model = _block()
    _run_and_check(model, 5)
    object_cache.wait()
    assert not os.path.isdir(object_cache.folder()) or not os.listdir(object_cache.folder())
    _fresh_process_state()
    _run_and_check(model, 6)
    assert launch.compiled_by["engine"] >= 2 and not launch.compiled_by["library"]
