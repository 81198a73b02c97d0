"""The one-command GPU run (tools/bench/run_gpu.sh), rehearsed on this CPU machine so it cannot rot
between the rare GPU sessions: offline (PIP_NO_INDEX=1), from a packed torch-mlir, installing
uniorch into an interpreter that does not have it, then every stage on the interpreter.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(bool(os.environ.get("UNIORCH_REHEARSAL_IN_COMPAT_RUN")),
                    reason="scripts/test.sh rehearses the GPU run once, in the GPU machine's Triton (its second run)")
def test_rehearsal_runs_every_stage_offline(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, UNIORCH_REHEARSE_PYTHON=sys.executable, TMPDIR=str(tmp_path))
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(["bash", "tools/bench/run_gpu.sh", "--rehearse", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    session = json.loads((out / "session.json").read_text())
    assert list(session["stages"]) == ["env", "bench", "conformance", "zoo", "aot", "host", "tiles"], log[-3000:]
    assert {name: st["status"] for name, st in session["stages"].items()} == dict.fromkeys(session["stages"], "ok")
    # what the rehearsal had to do for real: the pack unpacked, uniorch installed offline
    assert "unpacking torch_mlir-" in log and "installing uniorch" in log, log[-3000:]
    machine = session["machine"]
    assert "MISSING" not in json.dumps(machine), machine
    assert machine["auto_target"].startswith(("cpu", "interpret")), machine  # no GPU in a rehearsal
    # the zoo ran compiled, both dtypes, with nothing left to eager, and so did the bundle
    jit = session["jit"]
    assert {r["dtype"] for r in jit} == {"fp32", "bf16"}, jit
    assert all(r["correct"] and r["fallbacks"] == 0 for r in jit), jit
    assert session["aot"] and all(r["correct"] for r in session["aot"]), session["aot"]
    bench = session["bench"]
    assert bench["results"] and all(r["correct"] for r in bench["results"]), bench["results"]
    assert all(r["fallbacks"] == 0 for r in bench["results"]), bench["results"]
    # the host profile: a compiled call's host time beside eager's, and where it goes
    host = session["host"]["rows"]
    assert host and all(r["host_us"] > 0 and r["eager_host_us"] > 0 and r["kernels"] >= 1 for r in host), host
    assert "by cumulative time" in (out / "session.log").read_text()
    # the matmul rows tuned: per kernel its default tiles, the chosen ones and each candidate's time
    tiles = session["tiles"]
    assert tiles and all(t["default"] and t["chosen"] and len(t["ms"]) >= 2 for t in tiles), tiles
    # the table is the last thing printed
    tail = proc.stdout.strip().splitlines()
    assert any(line.startswith("stage") for line in tail[-30:]), proc.stdout[-3000:]
    assert (out / "session.log").is_file() and (out / "zoo.jsonl").is_file()
    assert len(list(out.iterdir())) <= 8  # a device call brings back at most 8 files


def test_a_stage_over_its_budget_is_stopped_and_the_session_goes_on(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "uniorch.tools.bench.gpu_session", "--rehearse", "--out", str(out),
                           "--stages", "conformance,env", "--budget", "conformance=3"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    session = json.loads((out / "session.json").read_text())
    assert session["stages"]["conformance"]["status"] == "timeout"
    assert session["stages"]["conformance"]["seconds"] < 30
    assert session["stages"]["env"]["status"] == "ok"
    assert "stopped after its budget" in (out / "session.log").read_text()


def test_unknown_stage_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "uniorch.tools.bench.gpu_session", "--out", str(tmp_path),
                           "--stages", "zoo,warp"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "unknown stage ['warp']" in proc.stderr
