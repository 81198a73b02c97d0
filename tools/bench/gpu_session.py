"""The stages of one GPU run, each in its own process under its own time budget; a table last.

    python -m uniorch.tools.bench.gpu_session --out OUT [--rehearse] [--stages env,conformance,zoo,aot,bench]
        [--budget zoo=300 ...] [--deadline SECONDS] [--models a,b] [--dtypes fp32,bf16] [--bench-args "..."]

`tools/bench/run_gpu.sh` calls this after unpacking torch-mlir and installing uniorch. A stage that
runs past its budget is stopped (its process group killed) and the next one starts, so one slow
stage cannot eat the device time; `--deadline` caps the whole session (a device call is limited to
10 minutes). What comes back in OUT: session.log (every stage's output), session.json (machine,
stages, rows), zoo.jsonl, aot.jsonl, the benchmark's JSON and roofline PNG, and host_profile.json
(where a compiled call's host time goes; its profiles are in session.log).
`--rehearse` runs the same stages on a CPU machine: the interpreter as target, the benchmark's CPU
smoke mode, small defaults.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

STAGES = ("env", "bench", "conformance", "zoo", "aot", "host", "tiles")
# seconds; with the unpack and install before them, the session's deadline (run_gpu.sh) caps the sum.
# A session has 15 minutes of device time, the machine's start included: one call of under 10
# minutes. So the benchmark, which the goal is measured by, runs first; the correctness stages
# after it took 157 s in H200 run 6 (conformance 30, zoo 99, aot 28), and the host profile fits
# in what is left of UNIORCH_SESSION_SECONDS=555.
BUDGETS = {"env": 20, "bench": 290, "conformance": 40, "zoo": 105, "aot": 35, "host": 45, "tiles": 90}
# the matmul rows again with every contraction tuned over runtime/autotune.py's candidates, each
# candidate's time recorded: which tiles beat the schedule's own on this GPU (float32 FMA tiles
# were chosen by ptxas and SASS counts on a CPU machine, never timed). Last: it runs only if the
# rest left time
TILES_BENCH = ("--device cuda --quick --dtype fp32,bf16 --backends uniorch_autotune --models "
               "mlp,matmul_bias_gelu")
# both dtypes and two training steps in one stage, max-autotune left out (its compiles take
# minutes per matmul). H200 run 6 finished 24 rows in 222 s; a training row takes 40 s or more
# (uniorch's cold compile of gpt2_block_train: 28 s), so of the training steps only GPT-2's block
# with SDPA and with nanoGPT's written-out attention (session 24's backward) are in;
# mlp_train, resnet_stack_train and llama_block_train are for a run of their own
# (`--bench-args`, README)
GPU_BENCH = ("--device cuda --quick --dtype bf16,fp32 --backends eager,inductor,uniorch --models "
             "mlp,matmul_bias_gelu,gpt2_block,attention,bert_layer,llama_block,layernorm,softmax,gelu_silu_chain,"
             "add_layernorm,decode_attention,resnet_stack,gpt2_block_train,nanogpt_block_train,moe_experts")
REHEARSAL = {"models": "mlp", "dtypes": "fp32,bf16",
             "bench": "--device cpu --models gelu_silu_chain --dtype fp32,bf16 --backends eager,uniorch --quick",
             "host": "--device cpu --models layernorm --dtype fp32 --calls 3 --profile-calls 1",
             "tiles": "--device cpu --models mlp --dtype fp32 --backends uniorch_autotune --quick"}

ENV_PROBE = r"""
import json, platform, subprocess, sys
info = {"python": platform.python_version()}
import torch
info["torch"] = torch.__version__
info["cuda"] = torch.version.cuda
info["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
if torch.cuda.is_available():
    info["capability"] = "sm_%d%d" % torch.cuda.get_device_capability(0)
for mod in ("triton", "torch_mlir", "uniorch"):
    try:
        m = __import__(mod)
        info[mod] = getattr(m, "__version__", None) or getattr(m, "__file__", "present")
    except Exception as err:
        info[mod] = "MISSING: %s: %s" % (type(err).__name__, err)
import uniorch.tools, uniorch.backends, uniorch.passes
from uniorch.targets import parse_target
info["auto_target"] = str(parse_target("auto"))
print(json.dumps(info))
"""


def _budgets(specs: list[str]) -> dict[str, int]:
    out = dict(BUDGETS)
    for spec in specs:
        name, _, secs = spec.partition("=")
        if name not in STAGES or not secs.isdigit():
            raise SystemExit(f"gpu_session: --budget {spec!r}: expected STAGE=SECONDS with STAGE one of {', '.join(STAGES)}")
        out[name] = int(secs)
    return out


def _run(cmd: list[str], log, budget: float, env: dict | None = None) -> tuple[str, float, int | None]:
    """Runs `cmd` with output to `log`; ('ok' | 'failed' | 'timeout', seconds, return code)."""
    t0 = time.monotonic()
    log.write(f"$ {shlex.join(cmd)}   # budget {budget:.0f}s\n")
    log.flush()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(os.environ, **env) if env else None)
    try:
        rc = proc.wait(timeout=max(1.0, budget))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.write(f"[stopped after its budget of {budget:.0f}s]\n")
        return "timeout", time.monotonic() - t0, None
    finally:
        try:  # workers a stage left behind (a pool's processes) go with it
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return ("ok" if rc == 0 else "failed"), time.monotonic() - t0, rc


def _read_jsonl(path: str) -> list[dict]:
    if not os.path.isfile(path):
        return []
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass  # a line cut by the budget's kill
    return rows


def _tail(path: str, marker: str) -> str:
    """The last line of a log section containing `marker` (e.g. the conformance kit's count)."""
    try:
        with open(path) as f:
            lines = [ln.strip() for ln in f if marker in ln]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _bench_file(out: str) -> str | None:
    files = sorted(f for f in os.listdir(out) if f.endswith(".json") and f[:4].isdigit())
    return os.path.join(out, files[-1]) if files else None


def tile_choices(path: str | None) -> list[dict]:
    """Per tuned kernel of a `uniorch_autotune` benchmark file: its default and chosen tiles
    (block_m, block_n, block_k, warps, stages) and every candidate's ms per launch (or error)."""
    if not path:
        return []
    with open(path) as f:
        results = json.load(f).get("results", [])
    out = []
    for r in results:
        for kernel, c in (r.get("autotune_choices") or {}).items():
            ms = {cfg: (round(t * 1e3, 4) if isinstance(t, (int, float)) else t)
                  for cfg, t in c.get("seconds", {}).items()}
            out.append({"model": r.get("model"), "dtype": r.get("dtype"), "kernel": kernel,
                        "default": c.get("default"), "chosen": c.get("chosen"), "ms": ms})
    return out


def summarize_rows(rows: list[dict]) -> str:
    if not rows:
        return "no rows"
    ok = sum(1 for r in rows if r.get("correct"))
    failed = sum(1 for r in rows if r.get("correct") is False)
    skipped = sum(1 for r in rows if r.get("correct") is None)
    fb = sum(1 for r in rows if r.get("fallbacks"))
    return f"{ok}/{len(rows)} correct, {failed} failed, {skipped} skipped, {fb} with eager fallbacks"


def table(session: dict) -> str:
    lines = [f"{'stage':12} {'status':8} {'s':>6}  summary"]
    for name, st in session["stages"].items():
        lines.append(f"{name:12} {st['status']:8} {st['seconds']:6.1f}  {st.get('summary', '')}")
    rows = {}
    for path in ("jit", "aot"):
        for r in session.get(path, []):
            rows.setdefault((r.get("model"), r.get("dtype")), {})[path] = r
    if rows:
        lines += ["", f"{'model':24} {'dtype':5} {'jit':5} {'aot':5} {'rel_err':>9} {'kernels':>7} {'fallbk':>6} {'compile_s':>9}"]

        def mark(r):
            if r is None:
                return "-"
            return "ok" if r.get("correct") else ("skip" if r.get("correct") is None else "FAIL")

        for (model, dtype), by in sorted(rows.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
            j, a = by.get("jit"), by.get("aot")
            src = j or a
            err = src.get("rel_err")
            err = f"{err:.1e}" if isinstance(err, (int, float)) else str(err if err is not None else "-")
            lines.append(f"{model:24} {dtype:5} {mark(j):5} {mark(a):5} {err:>9} {str(src.get('kernels', '-')):>7} "
                         f"{str(src.get('fallbacks', '-')):>6} {str((j or {}).get('compile_s', '-')):>9}")
    bench = session.get("bench")
    if bench:
        lines += ["", f"{'workload':18} {'dtype':5} {'eager_ms':>9} {'inductor_ms':>11} {'uniorch_ms':>10} "
                      f"{'(device)':>9} {'(host)':>9} {'ind.host':>9} {'correct':>7} {'GB/s':>7}"]
        for r in bench.get("results", []):
            def ms(v):
                return f"{v:.3f}" if isinstance(v, (int, float)) else "-"
            gbps = r.get("achieved_GBps")
            lines.append(f"{r['model']:18} {r['dtype']:5} {ms(r.get('eager_ms')):>9} {ms(r.get('inductor_ms')):>11} "
                         f"{ms(r.get('uniorch_ms')):>10} {ms(r.get('device_ms')):>9} {ms(r.get('uniorch_host_ms')):>9} "
                         f"{ms(r.get('inductor_host_ms')):>9} {str(r.get('correct')):>7} "
                         f"{(f'{gbps:.0f}' if isinstance(gbps, (int, float)) else '-'):>7}")
        peaks = f"copy {bench.get('peak_copy_GBps')} GB/s, bf16 matmul {bench.get('peak_bf16_tflops')} TFLOP/s"
        lines.append(f"peaks measured in this run: {peaks}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m uniorch.tools.bench.gpu_session", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--bundles", default=os.path.join(".carry", "bundles"),
                   help="the unpacked bundles (run_gpu.sh unpacks .carry/bundles.tar.xz and passes it)")
    p.add_argument("--rehearse", action="store_true", help="the same stages on this CPU machine, on the interpreter")
    p.add_argument("--stages", default=",".join(STAGES))
    p.add_argument("--budget", action="append", default=[], help="STAGE=SECONDS, repeatable")
    p.add_argument("--deadline", type=float, default=570.0, help="seconds for the whole session")
    p.add_argument("--models", help="zoo models (jit and aot); default all (rehearsal: mlp)")
    p.add_argument("--dtypes", help="default fp32,bf16")
    p.add_argument("--jobs", type=int, default=0, help="zoo worker processes (default: half the cores, at most 8)")
    p.add_argument("--bench-args", help="arguments for python -m uniorch.tools.bench (default: GPU_BENCH)")
    a = p.parse_args(argv)
    start = time.monotonic()
    stages = [s for s in a.stages.split(",") if s]
    bad = [s for s in stages if s not in STAGES]
    if bad:
        p.error(f"unknown stage {bad}; stages: {', '.join(STAGES)}")
    budgets = _budgets(a.budget)
    models = a.models if a.models is not None else (REHEARSAL["models"] if a.rehearse else "")
    dtypes = a.dtypes or REHEARSAL["dtypes"]
    target = "interpret" if a.rehearse else "cuda"
    bench_args = shlex.split(a.bench_args if a.bench_args is not None else
                             (REHEARSAL["bench"] if a.rehearse else GPU_BENCH))
    os.makedirs(a.out, exist_ok=True)
    py = sys.executable
    log_path = os.path.join(a.out, "session.log")
    session: dict = {"rehearse": a.rehearse, "target": target, "stages": {}}
    common = ["--dtypes", dtypes, "--jobs", str(a.jobs)] + (["--models", models] if models else [])
    tiles_dir = tempfile.mkdtemp(prefix="uniorch-tiles-")
    commands = {
        "env": [py, "-c", ENV_PROBE],
        "conformance": [py, "-m", "uniorch.testing.conformance", "--target", target],
        "zoo": [py, "-m", "uniorch.tools.bench.zoo_check", "jit", "--target", target,
                "--out", os.path.join(a.out, "zoo.jsonl")] + common,
        "aot": [py, "-m", "uniorch.tools.bench.zoo_check", "aot", "--bundles", a.bundles,
                "--out", os.path.join(a.out, "aot.jsonl")] + common,
        "bench": [py, "-m", "uniorch.tools.bench", *bench_args, "--out", a.out],
        # where a call's host time goes (tools/bench/host_profile.py)
        "host": [py, "-m", "uniorch.tools.bench.host_profile", "--out", a.out]
        + (shlex.split(REHEARSAL["host"]) if a.rehearse else []),
        # its result file goes beside OUT, not in it (a device call brings back few files): the
        # per-candidate times are copied into session.json
        "tiles": [py, "-m", "uniorch.tools.bench", *shlex.split(REHEARSAL["tiles"] if a.rehearse else TILES_BENCH),
                  "--out", tiles_dir],
    }
    with open(log_path, "a") as log:
        for name in stages:
            left = a.deadline - (time.monotonic() - start)
            if left < 5:
                session["stages"][name] = {"status": "skipped", "seconds": 0.0, "summary": "no time left before the deadline"}
                continue
            log.write(f"\n===== {name} =====\n")
            log.flush()
            print(f"[{time.monotonic() - start:6.1f}s] {name} (budget {min(budgets[name], left):.0f}s)", flush=True)
            # a rehearsal tunes on the interpreter, where tuning is off unless forced
            env = {"UNIORCH_AUTOTUNE": "force"} if a.rehearse and name == "tiles" else None
            status, secs, rc = _run(commands[name], log, min(budgets[name], left), env)
            st = {"status": status, "seconds": round(secs, 1), "rc": rc}
            if name == "env":
                try:
                    with open(log_path) as f:
                        probe = [ln for ln in f.read().splitlines() if ln.startswith("{")]
                    session["machine"] = json.loads(probe[-1])
                    m = session["machine"]
                    st["summary"] = (f"{m.get('device')} {m.get('capability', '')}, torch {m.get('torch')}, "
                                     f"triton {m.get('triton')}, auto -> {m.get('auto_target')}")
                except (OSError, ValueError, IndexError):
                    st["summary"] = "no probe output (see session.log)"
            elif name == "conformance":
                st["summary"] = _tail(log_path, " passed, ")
            elif name in ("zoo", "aot"):
                rows = _read_jsonl(os.path.join(a.out, f"{name}.jsonl"))
                session["jit" if name == "zoo" else "aot"] = rows
                st["summary"] = summarize_rows(rows)
                if rows and any(r.get("correct") is False for r in rows) and status == "ok":
                    st["status"] = "failed"
            elif name == "host":
                try:
                    with open(os.path.join(a.out, "host_profile.json")) as f:
                        session["host"] = json.load(f)
                    st["summary"] = ", ".join(
                        f"{r['model']} {r['host_us']:.0f}/{r['eager_host_us']:.0f} us" if "host_us" in r
                        else f"{r['model']} error" for r in session["host"]["rows"]) + " (host per call, ours/eager)"
                except (OSError, ValueError, KeyError):
                    st["summary"] = "no host_profile.json (see session.log)"
            elif name == "tiles":
                session["tiles"] = tile_choices(_bench_file(tiles_dir))
                st["summary"] = f"{len(session['tiles'])} kernels tuned; " + "; ".join(
                    f"{t['model']} {t['dtype']} {t['kernel']} {t['default']} -> {t['chosen']}"
                    for t in session["tiles"][:6])
            elif name == "bench":
                path = _bench_file(a.out)
                if path:
                    with open(path) as f:
                        session["bench"] = json.load(f)
                    s = session["bench"].get("summary", {})
                    st["summary"] = f"{len(session['bench'].get('results', []))} rows; " + ", ".join(
                        f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in list(s.items())[:4])
                else:
                    st["summary"] = "no result file"
            session["stages"][name] = st
            with open(os.path.join(a.out, "session.json"), "w") as f:
                json.dump(session, f, indent=1, default=str)
    text = table(session)
    with open(log_path, "a") as log:
        log.write("\n" + text + "\n")
    print(text, flush=True)
    return 0 if all(st["status"] == "ok" for st in session["stages"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
