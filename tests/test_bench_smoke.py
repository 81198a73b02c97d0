"""The benchmark harness (tools/bench) in its CPU smoke mode: tiny shapes on the cpu target.

It checks the harness, not performance: the JSON has every documented field, uniorch's outputs
match eager, and a failing backend is recorded instead of stopping the run. torch.compile joins
only under UNIORCH_SLOW_TESTS=1: its first CPU compile builds C++ and takes about a minute here.
"""
import json
import os
import subprocess
import sys

import torch

from uniorch import config
from uniorch.tools.bench import backends, report, runner
from uniorch.tools.bench.workloads import WORKLOADS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP = ["device", "commit", "date", "torch", "triton", "peak_copy_GBps", "peak_bf16_tflops", "results"]
ROW = ["model", "dtype", "eager_ms", "inductor_ms", "inductor_max_autotune_ms", "uniorch_ms", "correct",
       "kernels", "uniorch_compile_s", "inductor_compile_s", "achieved_GBps"]
MODELS = ["layernorm", "gelu_silu_chain", "matmul_bias_gelu"]


def test_cli_cpu_smoke(tmp_path):
    backends_ = "eager,inductor,uniorch" if config.flag("UNIORCH_SLOW_TESTS") else "eager,uniorch"
    cmd = [sys.executable, "-m", "uniorch.tools.bench", "--device", "cpu", "--dtype", "fp32", "--quick",
           "--models", ",".join(MODELS), "--backends", backends_, "--out", str(tmp_path), "--no-plot"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = tmp_path.glob("*-cpu.json")
    data = json.loads(path.read_text())
    assert all(k in data for k in TOP), set(TOP) - set(data)
    assert data["device"] == "cpu" and data["peak_copy_GBps"] > 0 and data["peak_bf16_tflops"] > 0
    assert [r["model"] for r in data["results"]] == MODELS
    for r in data["results"]:
        assert all(k in r for k in ROW), set(ROW) - set(r)
        assert r["correct"] is True, (r["model"], r["rel_err"], r["errors"])
        assert r["eager_ms"] > 0 and r["uniorch_ms"] > 0 and r["uniorch_compile_s"] > 0
        assert r["uniorch_host_ms"] > 0 and r["eager_host_ms"] > 0  # host time beside the median
        assert r["kernels"] >= 1 and r["achieved_GBps"] > 0
        stages = r["uniorch_compile_stages"]  # where the cold compile went
        assert stages["capture"] > 0 and stages["passes"] > 0 and stages["compile"] >= stages["passes"]
        assert "inductor_max_autotune" not in r["errors"]   # not asked for, so not attempted
    assert data["results"][-1]["flops"] == 2 * 16 * 32 * 32   # the matmul's FLOPs, for the roofline
    assert "geomean speedup of uniorch" in proc.stdout


def test_autotuned_backend_runs(tmp_path):
    """uniorch_autotune: the first call tunes the contraction tiles (forced on the interpreter here)."""
    cmd = [sys.executable, "-m", "uniorch.tools.bench", "--device", "cpu", "--dtype", "fp32", "--quick",
           "--models", "matmul_bias_gelu", "--backends", "eager,uniorch_autotune", "--out", str(tmp_path), "--no-plot"]
    env = dict(os.environ, UNIORCH_AUTOTUNE="force")
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (path,) = tmp_path.glob("*-cpu.json")
    (row,) = json.loads(path.read_text())["results"]
    assert row["uniorch_autotune_ms"] > 0 and row["checks"]["uniorch_autotune"] is True, row
    # what tuning picked, for the next schedule defaults: one kernel, its candidates measured
    (choice,) = row["autotune_choices"].values()
    assert choice["chosen"] in [json.loads(k.replace("(", "[").replace(")", "]")) for k in choice["seconds"]]
    assert len(choice["seconds"]) >= 3 and choice["default"] == list(choice["default"])


def test_bf16_chain_runs_as_kernels(tmp_path):
    """bf16 gelu/silu hold bf16 constants; where the interpreter could not build them (Triton 3.6)
    every kernel fell back to eager and the row still read correct, only its fallbacks told."""
    opt = runner.Options("cpu", ["eager", "uniorch"], warmup=0, iters=1, cache_root=str(tmp_path))
    row = runner.run_workload(WORKLOADS["gelu_silu_chain"], "bf16", opt)
    assert row["errors"] == {} and row["correct"] is True, row
    assert row["fallbacks"] == 0 and row["kernels"] >= 1, row


def test_failing_backend_is_recorded(monkeypatch, tmp_path):
    def boom(fn, device):
        raise RuntimeError("compiler exploded")

    monkeypatch.setitem(backends.BACKENDS, "uniorch", backends.Backend("uniorch", boom, uniorch=True))
    opt = runner.Options("cpu", ["eager", "uniorch"], warmup=0, iters=1, cache_root=str(tmp_path))
    row = runner.run_workload(WORKLOADS["softmax"], "fp32", opt)
    assert row["eager_ms"] > 0 and row["uniorch_ms"] is None and row["correct"] is None
    assert row["errors"] == {"uniorch": "RuntimeError: compiler exploded"}
    assert "compiler exploded" in report.table([row], 1.0)


def test_rel_error_flags_nan_and_shape():
    ref = torch.ones(4)
    assert runner.rel_error(ref + 1e-6, ref) <= 1e-4
    assert runner.rel_error(torch.full((4,), float("nan")), ref) != runner.rel_error(ref, ref)
    assert runner.rel_error(torch.ones(5), ref) == float("inf")


def test_training_step_workloads(tmp_path):
    """Forward, backward and AdamW per call, judged on the first step's gradients against eager's;
    the row counts the kernels of both graphs and of the optimizer's update. (On the GPU run torch.compile joins, with the model and
    `opt.step` compiled.)"""
    opt = runner.Options("cpu", ["eager", "uniorch"], warmup=0, iters=1, cache_root=str(tmp_path))
    for name in ("mlp_train", "resnet_stack_train"):
        row = runner.run_workload(WORKLOADS[name], "fp32", opt)
        assert row["errors"] == {} and row["correct"] is True, row
        assert row["fallbacks"] == 0 and 0 < row["backward_kernels"] < row["kernels"], row
        # the optimizer's kernels too, every name once (the profiler's times go by name)
        names = [k["name"] for k in row["kernel_stats"]]
        assert row["optimizer_kernels"] > 0 and len(set(names)) == len(names), names
        assert row["optimizer_bytes"] > 0 and any(n.startswith("opt_") for n in names), names
        assert row["saved_bytes"] > 0 and row["eager_saved_bytes"] > 0 and row["flops"] > 0
        assert row["eager_ms"] > 0 and row["uniorch_ms"] > 0
    skipped = runner.run_workload(WORKLOADS["mlp_train"], "bf16", opt)
    assert "fp32 only" in skipped["errors"]["setup"]


def test_graphed_backend_runs(tmp_path):
    """uniorch_graphs: compiled with cuda_graphs=True (on the CPU the plan runs as without it)."""
    opt = runner.Options("cpu", ["eager", "uniorch_graphs"], warmup=1, iters=2, cache_root=str(tmp_path))
    row = runner.run_workload(WORKLOADS["gelu_silu_chain"], "fp32", opt)
    assert row["errors"] == {} and row["checks"]["uniorch_graphs"] is True, row


def test_kernel_times_match_whole_function_names(monkeypatch):
    """Profiler times go to the kernel whose function has that exact name: k1 is not k11, and a
    reduction's source defines its combine function before the kernel."""
    from types import SimpleNamespace

    from uniorch.tools.bench import runner

    times = {"k1_contraction": 1.0, "k11_contraction": 2.0, "k0_reduction": 3.0, "void at::native::copy": 0.5}
    monkeypatch.setattr(runner, "device_times", lambda cm, args, ops=None: dict(times))
    kernels = [SimpleNamespace(name="k0_reduction", source="@jit\ndef _combine_addf(a, b):\n    return a + b\n\n@jit\ndef k0_reduction(x):\n    pass\n"),
               SimpleNamespace(name="k1_contraction", source="def k1_contraction(\n    x):\n    pass\n"),
               SimpleNamespace(name="k11_contraction", source="def k11_contraction(x):\n    pass\n")]
    stats = [dict(name=k.name, ms=None) for k in kernels]
    row = {}
    runner._kernel_times(None, (), kernels, stats, row)
    assert [s["ms"] for s in stats] == [3.0, 1.0, 2.0]
    assert row["device_ms"] == 6.5


def test_host_profile_measures_the_host_path_without_launches(tmp_path):
    """host_profile's no-op column: the compiled call with every launch replaced by nothing, the
    launches restored afterwards (the same compiled model still computes eager's numbers)."""
    import uniorch
    from uniorch.tools.bench import host_profile

    model, args = WORKLOADS["layernorm"].make("cpu", torch.float32)
    cm = uniorch.compile(model, target="interpret")
    with torch.no_grad():
        cm(*args)
        us = host_profile.noop_host_us(cm, args, 5, "cpu")
        assert us > 0
        torch.testing.assert_close(cm(*args), model(*args))
    assert host_profile.main(["--out", str(tmp_path), "--device", "cpu", "--models", "layernorm", "--dtype", "fp32",
                              "--calls", "3", "--profile-calls", "2"]) == 0
    row = json.loads((tmp_path / "host_profile.json").read_text())["rows"][0]
    assert row["noop_host_us"] > 0 and row["kernels"] == 1


def test_spills_reads_registers_and_spills_off_ptxas():
    """tools/bench/spills.py: each kernel's registers and spilled bytes by ptxas -v, at CPU sizes
    here (the GPU sizes take minutes); a LayerNorm row kernel spills nothing."""
    from uniorch.tools.bench.spills import kernel_rows

    rows = kernel_rows("layernorm", "fp32", sizes="cpu")
    assert len(rows) == 1 and rows[0]["error"] is None, rows
    assert 0 < rows[0]["registers"] <= 255 and rows[0]["spilled"] == 0, rows


def test_spills_covers_a_training_steps_forward_and_backward():
    """--train: a training workload's forward and backward graphs (AOTAutograd's halves, as the
    training path gets them) cross-compiled and read by ptxas: gpt2_block_train's fp32 forward
    attention spilled inside its key loop on sm_90 and this is how it was found."""
    from uniorch.tools.bench.spills import kernel_rows

    rows = kernel_rows("mlp_train", "fp32", sizes="cpu")
    halves = {r["kernel"].split(".")[0] for r in rows}
    assert halves == {"fwd", "bwd"}, rows
    assert all(r["error"] is None and 0 < r["registers"] <= 255 for r in rows), rows
    assert sum(r["kind"] == "contraction" for r in rows if r["kernel"].startswith("bwd.")) >= 2, rows
