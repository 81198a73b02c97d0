"""Where a compiled call's host time goes: per-call host and wall time, and a profile of the calls.

    python -m uniorch.tools.bench.host_profile --out OUT [--device cuda] [--models layernorm,bert_layer]
        [--dtype bf16] [--calls 200] [--sizes gpu|cpu]

Why: on the H200 (bench/results/2026-11-26-h200-run2) a one-kernel LayerNorm took 0.276 ms per call
for a 0.069 ms kernel, where eager took 0.105 ms: the host path, not the kernel, set the time, and
the benchmark alone cannot say which part of it. Per workload this measures, in one process:

- `host_us`: the time for a call to return, calls back to back without synchronising (launches are
  asynchronous: when this exceeds the kernels' time, the host is the bottleneck);
- `wall_us`: the same calls with the device synchronised at the end, per call;
- the same two for eager, for scale;
- `noop_host_us`: the host time per call with every kernel launch replaced by nothing: uniorch's
  own host path, without the backend's launch (on any machine, a CPU one included);
- a cProfile of `--profile-calls` calls, its top functions by own and by cumulative time, printed;
- Triton's own launch cost with no uniorch around it: a one-line kernel launched through
  `JITFunction` with 4 and with 24 arguments (our kernels pass every stride), and, where Triton
  exposes it, through the compiled kernel's launcher directly (what Inductor's generated code does).

Writes host_profile.json to OUT; prints the profiles, then a short table last.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import time

import torch


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _per_call(fn, args, calls: int, device: str) -> tuple[float, float]:
    """(host µs per call, wall µs per call) over `calls` back-to-back calls."""
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    t1 = time.perf_counter()
    _sync(device)
    t2 = time.perf_counter()
    return (t1 - t0) / calls * 1e6, (t2 - t0) / calls * 1e6


def _profile(fn, args, calls: int, top: int = 30) -> str:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn(*args)
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out).strip_dirs()
    out.write(f"--- by own time ({calls} calls) ---\n")
    stats.sort_stats("tottime").print_stats(top)
    out.write(f"--- by cumulative time ({calls} calls) ---\n")
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def workload_row(name: str, dtype_name: str, device: str, sizes: str, calls: int, profile_calls: int,
                 target: str) -> tuple[dict, str]:
    import uniorch
    from uniorch.tools.bench.workloads import WORKLOADS

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    model, args = WORKLOADS[name].make(device, dtype, sizes=sizes)
    row: dict = {"model": name, "dtype": dtype_name, "device": device, "sizes": sizes, "calls": calls}
    with torch.no_grad():
        t = time.perf_counter()
        cm = uniorch.compile(model, target=target)
        for _ in range(3):
            cm(*args)
        _sync(device)
        row["compile_s"] = round(time.perf_counter() - t, 2)
        row["kernels"] = len(cm.explain(*args).kernels)
        for _ in range(3):
            model(*args)
        row["host_us"], row["wall_us"] = _per_call(cm, args, calls, device)
        row["eager_host_us"], row["eager_wall_us"] = _per_call(model, args, calls, device)
        row["noop_host_us"] = noop_host_us(cm, args, calls, device)
        text = _profile(cm, args, profile_calls)
        # the same with the launches replayed as CUDA graphs (uniorch.compile(..., cuda_graphs=True))
        graphed = uniorch.compile(model, target=target, cuda_graphs=True)
        for _ in range(3):
            graphed(*args)
        _sync(device)
        row["graphs_host_us"], row["graphs_wall_us"] = _per_call(graphed, args, calls, device)
        row["graphs_replays"] = sum(getattr(r.graphs, "replays", 0) for e in graphed._cache.values()
                                    for r in e.program.regions)
    return row, f"===== {name} {dtype_name} ({row['kernels']} kernels) =====\n{text}\n"


def noop_host_us(cm, args, calls: int, device: str) -> float:
    """Host time per call with every kernel launch replaced by nothing: uniorch's own host path
    (inputs, guards, the plan's allocations and views, outputs), without the backend's launch.
    Measurable on any machine."""
    plans = [r.plan for e in cm._cache.values() for r in e.program.regions]
    kernels = [k for p in plans for k in p.kernels.values()]
    real, bound = [k.fn for k in kernels], [p.bound for p in plans]
    try:
        for k in kernels:
            k.fn = _noop
        for p in plans:  # bound launches call the launcher itself, not k.fn (runtime/bound_launch.py)
            p.bound = None
        for _ in range(3):
            cm(*args)
        return _per_call(cm, args, calls, device)[0]
    finally:
        for k, fn in zip(kernels, real):
            k.fn = fn
        for p, b in zip(plans, bound):
            p.bound = b


def _noop(*args) -> None:
    return None


_KERNEL_SRC = '''
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


@triton.jit
def add_one_wide(x_ptr, n, s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15, s16, s17,
                 s18, s19, s20, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs * s0, tl.load(x_ptr + offs * s0, mask=offs < n) + 1, mask=offs < n)
'''


def triton_launch_rows(device: str, calls: int) -> list[dict]:
    """Triton's launch cost alone: JITFunction with few and many arguments, and the compiled
    kernel's own launcher where this Triton has one."""
    import importlib.util
    import tempfile

    rows: list[dict] = []
    if not device.startswith("cuda"):
        return rows
    with tempfile.TemporaryDirectory() as d:  # @triton.jit needs its source in a file
        path = os.path.join(d, "uniorch_host_probe.py")
        with open(path, "w") as f:
            f.write(_KERNEL_SRC)
        spec = importlib.util.spec_from_file_location("uniorch_host_probe", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        x = torch.zeros(1024, device=device)
        strides = [1] + [7] * 20
        for label, fn, extra in (("jit, 4 args", mod.add_one, []), ("jit, 24 args", mod.add_one_wide, strides)):
            compiled = fn[(1,)](x, 1024, *extra, BLOCK=1024)
            host, wall = _per_call(lambda: fn[(1,)](x, 1024, *extra, BLOCK=1024), (), calls, device)
            rows.append({"launch": label, "host_us": round(host, 2), "wall_us": round(wall, 2)})
            runner = None
            try:  # CompiledKernel[grid](*args, *constexprs): the launcher without JITFunction's binding
                runner = compiled[(1, 1, 1)]
                runner(x, 1024, *extra, 1024)
            except Exception as err:  # noqa: BLE001 - an API this Triton lacks is a result, not a failure
                rows.append({"launch": label.replace("jit", "compiled kernel"), "error": f"{type(err).__name__}: {err}"})
            if runner is not None:
                host, wall = _per_call(lambda: runner(x, 1024, *extra, 1024), (), calls, device)
                rows.append({"launch": label.replace("jit", "compiled kernel"), "host_us": round(host, 2),
                             "wall_us": round(wall, 2)})
        _sync(device)
        rows.append({"launch": "check", "ok": bool((x[:1024] > 0).all().item())})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m uniorch.tools.bench.host_profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--target", default=None, help="uniorch target (default: auto on cuda, interpret on cpu)")
    p.add_argument("--models", default="layernorm,softmax,bert_layer")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--sizes", default=None, help="gpu or cpu (default: the device's)")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--profile-calls", type=int, default=50)
    a = p.parse_args(argv)
    target = a.target or ("auto" if a.device.startswith("cuda") else "interpret")
    sizes = a.sizes or ("cpu" if a.device == "cpu" else "gpu")
    os.makedirs(a.out, exist_ok=True)
    result: dict = {"device": torch.cuda.get_device_name(0) if a.device.startswith("cuda") else "cpu",
                    "torch": torch.__version__, "target": target, "rows": [], "triton_launch": []}
    texts = []
    for name in [m for m in a.models.split(",") if m]:
        try:
            row, text = workload_row(name, a.dtype, a.device, sizes, a.calls, a.profile_calls, target)
        except Exception as err:  # noqa: BLE001 - one workload's failure is reported, the rest still run
            row, text = {"model": name, "dtype": a.dtype, "error": f"{type(err).__name__}: {err}"}, ""
        result["rows"].append(row)
        texts.append(text)
        print(json.dumps(row), flush=True)
    try:
        result["triton_launch"] = triton_launch_rows(a.device, a.calls)
    except Exception as err:  # noqa: BLE001
        result["triton_launch"] = [{"error": f"{type(err).__name__}: {err}"}]
    with open(os.path.join(a.out, "host_profile.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("\n".join(texts), flush=True)  # (into session.log in a GPU run: one file fewer to bring back)
    print(f"{'workload':22} {'kernels':>7} {'host us':>9} {'wall us':>9} {'no-op us':>9} {'eager host':>10} "
          f"{'eager wall':>10} {'graph host':>10} {'graph wall':>10}")
    for r in result["rows"]:
        if "error" in r:
            print(f"{r['model'] + ' ' + r['dtype']:22} error: {r['error'][:80]}")
            continue
        print(f"{r['model'] + ' ' + r['dtype']:22} {r['kernels']:7d} {r['host_us']:9.1f} {r['wall_us']:9.1f} "
              f"{r['noop_host_us']:9.1f} {r['eager_host_us']:10.1f} {r['eager_wall_us']:10.1f} "
              f"{r['graphs_host_us']:10.1f} {r['graphs_wall_us']:10.1f}")
    for r in result["triton_launch"]:
        print("triton launch:", json.dumps(r))
    return 0 if all("error" not in r for r in result["rows"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
