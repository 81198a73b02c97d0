"""The conformance kit, run the way a vendor runs it: `python -m uniorch.testing.conformance`, in a
fresh process, against the example plugin (examples/backend_plugin) and the interpreter.

The plugin is "installed" without pip or network: its package directory goes on PYTHONPATH and a
minimal .dist-info directory declaring its entry point goes beside it, which is all
importlib.metadata needs to find a `uniorch.backends` entry point.
"""
from __future__ import annotations

import os
import subprocess
import sys

import triton
from conftest import REPO

PLUGIN = os.path.join(REPO, "examples", "backend_plugin")


def _install_plugin(site: str) -> None:
    """What `pip install` would leave for entry-point discovery: METADATA and entry_points.txt."""
    info = os.path.join(site, "uniorch_example_backend-0.1.0.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: uniorch-example-backend\nVersion: 0.1.0\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        f.write("[uniorch.backends]\nexample = uniorch_example_backend:ExampleBackend\n")


def _kit(tmp_path, *args: str) -> subprocess.CompletedProcess:
    site = str(tmp_path / "site")
    _install_plugin(site)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([site, PLUGIN, os.environ.get("PYTHONPATH", "")]),
               UNIORCH_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-m", "uniorch.testing.conformance", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def _kit_with(tmp_path, site, module: str, name: str, cls: str, *args: str) -> subprocess.CompletedProcess:
    """The kit for a plugin `module` beside the example's package in `site`, installed as pip would."""
    info = site / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[uniorch.backends]\n{name} = {module}:{cls}\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), PLUGIN, os.environ.get("PYTHONPATH", "")]),
               UNIORCH_CACHE_DIR=str(tmp_path / "cache"))
    return subprocess.run([sys.executable, "-m", "uniorch.testing.conformance", "--target", name, *args], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def test_example_plugin_and_interpreter_conform(tmp_path):
    # one process for both targets: torch and Triton are imported once
    proc = _kit(tmp_path, "--target", "example", "--target", "interpret")
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    assert "example:cpu → uniorch_example_backend.ExampleBackend" in out
    assert "triton → ttir → ttir_checked → summary" in out  # the plugin's own stages ran
    # Triton's interpreter before 3.7 cannot loop to a bound passed as an argument: there (the GPU
    # machine's Triton) the kit skips its symbolic run on interpreted backends, saying why
    old = tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7)
    totals = [line for line in out.splitlines() if line.startswith(("example:", "interpret:")) and "passed" in line]
    skipped = "1 skipped" if old else "0 skipped"
    assert len(totals) == 2 and all(f"0 failed, {skipped}" in line for line in totals), totals
    cases = ("softmax", "matmul_bias_gelu", "embedding", "bf16_silu_mul", "int32_select")
    cases += () if old else ("symbolic sizes",)
    for case in cases:
        assert [line for line in out.splitlines() if line.startswith("run") and case in line and "PASS" in line], case


def test_kit_fails_a_launcher_without_sizes(tmp_path):
    """The SDK's first launcher contract, `launcher(inputs, outputs)` and a static `ks.grid`, ran
    every kernel of a symbolic compile (dynamic=True, a second batch size in training) eagerly,
    and the kit passed it: it now fails it, saying what the launcher lacks."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "static_launcher_backend.py").write_text(
        "from uniorch_example_backend import ExampleBackend\n"
        "from uniorch.backends.sdk import tensor_args\n"
        "class Static(ExampleBackend):\n"
        "    name = 'static'\n"
        "    def load(self, kernel):\n"
        "        fn = super().load(kernel).fn\n"
        "        def launch(inputs, outputs):\n"
        "            fn[kernel.grid](*tensor_args(kernel, inputs, outputs), **kernel.constexprs)\n"
        "        return launch\n")
    proc = _kit_with(tmp_path, site, "static_launcher_backend", "static", "Static", "--cases", "softmax")
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    row = [line for line in proc.stdout.splitlines() if "symbolic sizes" in line]
    assert row and "FAIL" in row[0] and "takes no `sizes` argument" in row[0], proc.stdout


def test_kit_fails_a_plugin_whose_stage_breaks(tmp_path):
    # a stage failing must be a FAIL row and exit 1, never a crash or a silent pass
    site = tmp_path / "site"
    site.mkdir()
    (site / "broken_stage_backend.py").write_text(
        "from uniorch_example_backend import ExampleBackend\n"
        "class Broken(ExampleBackend):\n"
        "    name = 'broken'\n"
        "    def add_stages(self, stages, options):\n"
        "        def fail(src, metadata):\n"
        "            raise RuntimeError('vendor compiler crashed')\n"
        "        stages['vendor_ir'] = fail\n")
    proc = _kit_with(tmp_path, site, "broken_stage_backend", "broken", "Broken", "--cases", "softmax", "--compile-only")
    assert proc.returncode == 1, proc.stdout + proc.stderr[-2000:]
    assert "stage 'vendor_ir' failed" in proc.stdout and "vendor compiler crashed" in proc.stdout
