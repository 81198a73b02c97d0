"""Every zoo model on a target against eager, compiled now (`jit`) or from a bundle (`aot`).

    python -m uniorch.tools.bench.zoo_check jit --target cuda --out zoo.jsonl [--models a,b] [--dtypes fp32,bf16]
    python -m uniorch.tools.bench.zoo_check aot --bundles .carry/bundles --out aot.jsonl

One JSON row per model and dtype is appended to `--out` as soon as it is known, so a run stopped by
its time budget keeps what it finished. Models run in worker processes (`--jobs`): compiling is
single-threaded Python and Triton, and a GPU machine has cores to spare; a worker that crashes
costs its model only. Correctness follows `uniorch.testing.zoo.judge`.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import math
import multiprocessing
import os
import sys
import time
import traceback


def _jsonable(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _fallbacks(rep) -> list[str]:
    return [f"{f.op} ({f.stage}: {f.why})"[:200] for f in rep.fallbacks]


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _prepare(name: str, dtype_name: str, device: str, seed: int):
    import torch

    from uniorch.testing import zoo

    from .fp32 import set_exact_fp32

    dtype = zoo.DTYPES[dtype_name]
    model, args, kwargs = zoo.load(name)
    base = model  # fp32 on the CPU: the float64 reference is made from it when needed
    fargs, fkwargs = zoo.fresh_inputs(args, kwargs, seed)
    set_exact_fp32()  # fp32 means fp32 on both sides
    import copy

    model = zoo.model_to(copy.deepcopy(base), device, dtype if dtype_name != "fp32" else None)
    run_args, run_kwargs = zoo.to((fargs, fkwargs), device, dtype if dtype_name != "fp32" else None)
    return base, model, (fargs, fkwargs), (run_args, run_kwargs), dtype


def _judge(got, eager, dtype, base, inputs) -> dict:
    import copy

    import torch

    from uniorch.testing import zoo

    verdict = zoo.judge(got, eager, dtype)
    if not verdict["correct"] and zoo.comparable(got, eager):
        try:  # a float64 run of the same weights and inputs, on the CPU
            m64 = copy.deepcopy(base).double()
            a64, k64 = zoo.to(inputs, "cpu", torch.float64)
            ref = zoo.run_eager(m64, a64, k64)
            verdict = zoo.judge(got, eager, dtype, reference64=ref)
        except Exception as err:  # noqa: BLE001 - some models have no float64 form (e.g. int-only paths)
            verdict["fp64_error"] = f"{type(err).__name__}: {err}"[:300]
    return verdict


def check_jit(name: str, dtype_name: str, target: str, device: str, seed: int) -> dict:
    import torch

    import uniorch
    from uniorch.testing import zoo

    row = {"model": name, "dtype": dtype_name, "path": "jit", "target": target}
    base, model, inputs, (args, kwargs), dtype = _prepare(name, dtype_name, device, seed)
    try:
        eager = zoo.run_eager(model, args, kwargs)
    except Exception as err:  # noqa: BLE001 - eager itself cannot run this model in this dtype
        row.update(correct=None, skipped=f"eager fails: {type(err).__name__}: {err}"[:300])
        return row
    cm = uniorch.compile(model, target=target)
    t0 = time.perf_counter()
    with torch.no_grad():
        got = cm(*args, **kwargs)
    _sync(device)
    row["compile_s"] = round(time.perf_counter() - t0, 2)
    rep = cm.explain(*args, **kwargs)
    row.update(kernels=len(rep.kernels), fallbacks=len(rep.fallbacks), fallback_ops=_fallbacks(rep)[:5],
               compiled_fraction=round(rep.compiled_fraction, 4))
    row.update(_judge(got, eager, dtype, base, inputs))
    return row


def check_aot(entry: dict, bundles: str, device: str, seed: int) -> dict:
    import torch

    import uniorch
    from uniorch.testing import zoo

    name, dtype_name = entry["model"], entry["dtype"]
    row = {"model": name, "dtype": dtype_name, "path": "aot", "target": entry.get("target")}
    if entry.get("skipped"):
        row.update(correct=None, skipped=entry["skipped"])
        return row
    if entry.get("error"):
        row.update(correct=False, error=f"bundle not built: {entry['error']}"[:300])
        return row
    base, model, inputs, (args, kwargs), dtype = _prepare(name, dtype_name, device, seed)
    eager = zoo.run_eager(model, args, kwargs)
    t0 = time.perf_counter()
    fn = uniorch.load(os.path.join(bundles, entry["dir"]), model=model)
    row["load_s"] = round(time.perf_counter() - t0, 2)
    with torch.no_grad():
        got = fn(*args, **kwargs)
    _sync(device)
    row.update(kernels=entry.get("kernels"), fallbacks=entry.get("fallbacks"))
    row.update(_judge(got, eager, dtype, base, inputs))
    row.update(_specialized_launches(fn))
    return row


def _specialized_launches(fn) -> dict:
    """Launches of the bundle's kernels in their specialized form and in their generic form
    (backends/specialization.py): the generic form runs where arguments differ from the recorded ones."""
    special = generic = 0
    for region in fn.program.children():
        for k in getattr(getattr(region, "plan", None), "kernels", {}).values():
            special += getattr(getattr(k.fn, "specialized", None), "launches", 0)
            generic += getattr(k.fn, "launches", 0)
    return {"specialized_launches": special, "generic_launches": generic}


def _guarded(fn, *args) -> dict:
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001 - one model's failure is its row, not the run's end
        tb = traceback.format_exc(limit=6)
        return {"correct": False, "error": f"{type(err).__name__}: {err}"[:500], "traceback": tb[-2000:]}


def _task_jit(name, dtype_name, target, device, seed):
    row = _guarded(check_jit, name, dtype_name, target, device, seed)
    row.setdefault("model", name), row.setdefault("dtype", dtype_name), row.setdefault("path", "jit")
    return row


def _task_aot(entry, bundles, device, seed):
    row = _guarded(check_aot, entry, bundles, device, seed)
    row.setdefault("model", entry.get("model")), row.setdefault("dtype", entry.get("dtype"))
    row.setdefault("path", "aot")
    return row


def _emit(out, row: dict) -> None:
    row = {k: _jsonable(v) for k, v in row.items()}
    out.write(json.dumps(row) + "\n")
    out.flush()
    status = "ok" if row.get("correct") else ("skip" if row.get("correct") is None else "FAIL")
    err = row.get("rel_err")
    err = f"{err:.2e}" if isinstance(err, float) else str(err)  # a str slice cut 1.2e-07 to "1.2358074"
    detail = row.get("error") or row.get("skipped") or (
        f"rel_err {err} kernels {row.get('kernels')} fallbacks {row.get('fallbacks')}")
    print(f"{row['path']:4} {row['model']:24} {row['dtype']:5} {status:5} {detail}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m uniorch.tools.bench.zoo_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", choices=["jit", "aot"])
    p.add_argument("--target", default="auto", help="jit: the target to compile for (default auto)")
    p.add_argument("--bundles", help="aot: the folder prepare_gpu wrote (with index.json)")
    p.add_argument("--models", default="", help="comma-separated; default: every zoo model (jit) / bundle (aot)")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--jobs", type=int, default=0, help="worker processes (default: half the cores, at most 8)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", required=True, help="JSON-lines file, appended to")
    a = p.parse_args(argv)

    import torch

    from uniorch.testing import zoo

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtypes = [d for d in a.dtypes.split(",") if d]
    bad = [d for d in dtypes if d not in zoo.DTYPES]
    if bad:
        p.error(f"unknown dtype {bad}; known: {', '.join(zoo.DTYPES)}")
    wanted = [m for m in a.models.split(",") if m]
    if a.path == "jit":
        known = zoo.names()
        unknown = [m for m in wanted if m not in known]
        if unknown:
            p.error(f"unknown zoo model {unknown}; known: {', '.join(known)}")
        tasks = [(_task_jit, (m, d, a.target, device, a.seed)) for m in (wanted or known) for d in dtypes]
    else:
        if not a.bundles:
            p.error("aot needs --bundles (the folder prepare_gpu wrote)")
        index_path = os.path.join(a.bundles, "index.json")
        if not os.path.isfile(index_path):
            p.error(f"{index_path} does not exist: run `python -m uniorch.tools.bench.prepare_gpu` first")
        with open(index_path) as f:
            entries = json.load(f)["bundles"]
        entries = [e for e in entries if (not wanted or e["model"] in wanted) and e["dtype"] in dtypes]
        tasks = [(_task_aot, (e, a.bundles, device, a.seed)) for e in entries]
    jobs = a.jobs or max(1, min(8, (os.cpu_count() or 2) // 2))
    jobs = min(jobs, max(1, len(tasks)))
    print(f"{a.path}: {len(tasks)} runs on {device}, {jobs} worker(s)", flush=True)
    failures = 0
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "a") as out:
        if jobs == 1:
            for fn, args in tasks:
                row = fn(*args)
                failures += row.get("correct") is False
                _emit(out, row)
        else:
            # spawn: CUDA cannot be used in a forked child of a process that touched it
            ctx = multiprocessing.get_context("spawn")
            with cf.ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
                futures = {pool.submit(fn, *args): args for fn, args in tasks}
                for fut in cf.as_completed(futures):
                    try:
                        row = fut.result()
                    except Exception as err:  # noqa: BLE001 - a worker died (segfault, OOM): its task fails
                        args = futures[fut]
                        first = args[0]
                        model, dtype = (first["model"], first["dtype"]) if isinstance(first, dict) else args[:2]
                        row = {"model": model, "dtype": dtype, "path": a.path, "correct": False,
                               "error": f"worker died: {type(err).__name__}: {err}"[:300]}
                    failures += row.get("correct") is False
                    _emit(out, row)
    print(f"{a.path}: {len(tasks) - failures}/{len(tasks)} without failure", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
