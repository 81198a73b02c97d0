"""`python -m uniorch.tools.bench`: run the suite, write bench/results/<date>-<device>.json, print
the table, draw the roofline. The JSON is rewritten after every workload, so a run cut short by a
time limit still leaves every finished row."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

import torch

from . import report, roofline, timing
from .backends import BACKENDS, warm_process
from .fp32 import set_exact_fp32
from .runner import DTYPES, Options, run_workload
from .workloads import WORKLOADS

# how many timed calls: a GPU launch takes a few microseconds, a native cpu one tens (the
# interpreter, where Ascend's adapter is missing, ~0.1 s)
ITERS = {("cuda", False): (10, 50), ("cuda", True): (3, 10), ("cpu", False): (3, 20), ("cpu", True): (1, 5)}


def _split(values: list[str] | None) -> list[str]:
    return [v for item in values or [] for v in item.split(",") if v]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m uniorch.tools.bench", description=__doc__)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", nargs="+", default=["fp32,bf16"], help="fp32,bf16")
    p.add_argument("--models", nargs="+", help=f"default: all of {', '.join(WORKLOADS)}")
    p.add_argument("--backends", nargs="+", help=f"of {', '.join(BACKENDS)}; default all but uniorch_autotune and uniorch_graphs "
                   "(and on cpu without inductor_max_autotune, whose CPU autotuning takes minutes per matmul)")
    p.add_argument("--quick", action="store_true", help="fewer timed calls and smaller peak probes")
    p.add_argument("--sizes", choices=["cpu", "gpu"], help="override the device's workload sizes")
    p.add_argument("--out", default=os.path.join("bench", "results"))
    p.add_argument("--merge", action="store_true",
                   help="keep rows of an existing file of the same date and device (replacing same model+dtype)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--list", action="store_true", help="list workloads and exit")
    a = p.parse_args(argv)
    a.dtype = _split(a.dtype)
    a.models = _split(a.models) or list(WORKLOADS)
    # by default: not the tuned ones where they cannot tune (max-autotune on a CPU), nor uniorch's
    # tuning (minutes of measurements per model; ask for it by name)
    a.backends = _split(a.backends) or [b for b in BACKENDS if b not in ("uniorch_autotune", "uniorch_graphs")
                                        and not (a.device == "cpu" and b == "inductor_max_autotune")]
    for name, known, what in [(a.dtype, DTYPES, "dtype"), (a.models, WORKLOADS, "model"), (a.backends, BACKENDS, "backend")]:
        bad = [n for n in name if n not in known]
        if bad:
            p.error(f"unknown {what} {', '.join(bad)}; known: {', '.join(known)}")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA device (a CPU build of torch, or no GPU); use --device cpu")
    return a


def _git(*cmd: str) -> str | None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        return subprocess.run(["git", *cmd], cwd=here, capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except Exception:  # noqa: BLE001 - an installed copy or a machine without git: no commit
        return None


def _versions() -> dict:
    try:
        import triton
        tv = triton.__version__
    except Exception:  # noqa: BLE001
        tv = None
    return dict(torch=torch.__version__, triton=tv)


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else (platform.processor() or platform.machine())


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if a.list:
        for w in WORKLOADS.values():
            print(f"{w.name:<18} {w.kind:<6} gpu {w.gpu}  cpu {w.cpu}")
        return 0
    result, path = run(a)
    print(report.table(result["results"], result["peak_copy_GBps"]))
    print(f"\nwrote {path}")
    if not a.no_plot:
        png = path[:-len(".json")] + ".png"
        why = roofline.plot(result, png)
        print(why or f"wrote {png}")
    return 0


def run(a: argparse.Namespace) -> tuple[dict, str]:
    set_exact_fp32()
    if a.device == "cpu":
        # smoke sizes gain nothing from intra-op threads, and on a busy shared machine a thread
        # pool waiting for a free core turns a 5 us op into 25 ms
        torch.set_num_threads(1)
    date = datetime.date.today().isoformat()
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"{date}-{a.device}.json")
    sha = _git("rev-parse", "HEAD")
    result = dict(device=a.device, device_name=_device_name(a.device), commit=sha,
                  dirty=bool(_git("status", "--porcelain", "--untracked-files=no")) if sha else None,
                  date=date, **_versions(), tf32=False, threads=torch.get_num_threads(), quick=a.quick, sizes=a.sizes or ("cpu" if a.device == "cpu" else "gpu"),
                  backends=a.backends,
                  peak_copy_GBps=timing.peak_copy_GBps(a.device, a.quick),
                  peak_bf16_tflops=timing.peak_bf16_tflops(a.device, a.quick), results=[])
    old = []
    if a.merge and os.path.exists(path):
        with open(path) as f:
            old = json.load(f).get("results", [])
    cache_root = tempfile.mkdtemp(prefix="uniorch-bench-")
    try:
        warmup, iters = ITERS[(a.device, a.quick)]
        opt = Options(a.device, a.backends, warmup, iters, cache_root, sizes=a.sizes)
        opt.broken = warm_process(a.backends, a.device, cache_root)
        for name, err in opt.broken.items():
            print(f"[bench] {name} cannot compile here, recorded per workload: {err}", file=sys.stderr)
        runs = [(m, d) for m in a.models for d in a.dtype if d in WORKLOADS[m].dtypes]  # training: fp32 only
        rows = [r for r in old if (r["model"], r["dtype"]) not in set(runs)]
        for m, d in runs:
            print(f"[bench] {m} {d}", file=sys.stderr, flush=True)
            rows.append(run_workload(WORKLOADS[m], d, opt))
            result["results"] = rows
            result["summary"] = report.summary(rows, result["peak_copy_GBps"])
            _write(path, result)
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)
    return result, path


def _write(path: str, result: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1, default=str)   # NaN/inf rel errors stay valid for Python's json
    os.replace(tmp, path)
