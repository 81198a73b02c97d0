"""Static kernel report over the model zoo, and its check against per-model ceilings.

    python -m uniorch.tools.kernel_report [--dtypes fp32,bf16] [--models a,b] [--jobs N]
        [--write [DIR]] [--check [CEILINGS]] [--update-ceilings [CEILINGS]] [--vs-inductor]

Per zoo model and dtype: kernels, bytes moved against the minimum (inputs read once, outputs
written once), kernels doing float64 arithmetic, eager fallbacks and kernel kinds. Static: every
region is compiled to Triton source (`uniorch.api.explain_static`) and no kernel is launched, so
the whole zoo takes seconds per model instead of the interpreter's minutes. `--check` exits 1
naming each model and metric above its ceiling; fusion work lowers the ceilings
(`--update-ceilings` writes today's values, ratio plus 5 %) so a regression cannot slip back in.
`--vs-inductor` also compiles each model with torch.compile and sets Inductor's own count of its
bytes moved beside ours (a few seconds more per model).
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import multiprocessing
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

from uniorch.testing import zoo

ROOT = zoo.models_dir().parents[1]
PERF = ROOT / "docs" / "perf"
CEILINGS = PERF / "ceilings.json"
DTYPES = {**zoo.DTYPES, "fp64": torch.float64}
METRICS = ("kernels", "ratio", "f64_kernels", "fallbacks")  # what a ceiling bounds
RATIO_SLACK = 1.05  # new ceilings: bytes ratio rounded up by 5 %, counts exact

# The fusion goals (issue "kernel report"): name -> (what, models it applies to or None for all, test)
SOFTMAX = {"_softmax", "_safe_softmax", "softmax"}
ATTENTION_ZOO = ("attention_manual", "attention_sdpa")
TRANSFORMERS = ("hf_bert", "hf_gpt2", "hf_llama", "hf_t5", "hf_vit", "llama_block", "transformer_block")
CNNS = ("cnn_bn_eval", "cnn_bn_train", "cnn_pools", "conv_layernorm_misc", "densenet_block", "mobilenet_block",
        "unet_small")


def _causal_manual(q, k, v):
    t = q.shape[-2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool, device=q.device), 1), float("-inf"))
    return torch.softmax(s, -1) @ v


def _repeat_kv(x, n):  # transformers' Llama
    b, g, t, d = x.shape
    return x[:, :, None].expand(b, g, n, t, d).reshape(b, g * n, t, d)


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _qkv(h=2, hk=2, t=256, d=16):
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(1, n, t, d, generator=g) for n in (h, hk, hk))


# Causal attention alone at the size (B=1, H=2, T=256, d=16): the floor is q, k, v and the
# output, so the ratio shows whether the T x T scores reach memory. name -> () -> (model, args, kwargs)
PROBES = {
    "probe_attention_sdpa": lambda: (_Fn(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True)), _qkv(), {}),
    "probe_attention_manual": lambda: (_Fn(_causal_manual), _qkv(), {}),
    "probe_attention_gqa": lambda: (_Fn(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
        q, _repeat_kv(k, 2), _repeat_kv(v, 2), is_causal=True)), _qkv(h=4), {}),
}
GOALS = {
    "attention": ("causal attention (B=1, H=2, T=256, d=16; SDPA, written out, grouped-query) in one kernel, "
                  "≤1.5x minimum bytes", tuple(PROBES), lambda r: r["kernels"] == 1 and r["ratio"] <= 1.5),
    "attention-fused": ("every softmax of an attention model inside a flash-attention kernel",
                        ATTENTION_ZOO + TRANSFORMERS, lambda r: r["attention_fused"]),
    "no-f64": ("zero float64 kernels in fp32/bf16 models", None, lambda r: not r["f64_kernels"]),
    "transformer": ("transformer zoo models ≤1.6x minimum bytes", TRANSFORMERS, lambda r: r["ratio"] <= 1.6),
    "cnn": ("CNN blocks ≤2x minimum bytes", CNNS, lambda r: r["ratio"] <= 2.0),
}


def names() -> list[str]:
    """Every model the report measures: the zoo's, then the probes."""
    return zoo.names() + list(PROBES)


def _op(name: str) -> str:
    return name.removeprefix("aten.").split(".")[0]


def _load(name: str, dtype_name: str):
    model, args, kwargs = PROBES[name]() if name in PROBES else zoo.load(name)
    cast = None if dtype_name == "fp32" else DTYPES[dtype_name]  # fp32 is the zoo's own: as made
    model = zoo.model_to(model, "cpu", cast)
    args, kwargs = zoo.to((args, kwargs), "cpu", cast)
    return model, args, kwargs


def measure(name: str, dtype_name: str, target: str = "interpret", vs_inductor: bool = False) -> dict:
    """One model in one dtype, compiled without launching; `error` says why when it could not be.
    With `vs_inductor`, torch.compile's bytes for the same model too (tools/inductor_bytes.py)."""
    from uniorch.api import explain_static

    row: dict = {"model": name, "dtype": dtype_name}
    t = time.perf_counter()
    try:
        model, args, kwargs = _load(name, dtype_name)
        tensors = (*model.parameters(), *model.buffers(), *torch.utils._pytree.tree_leaves((args, kwargs)))
        floats = [x.dtype for x in tensors if isinstance(x, torch.Tensor) and x.is_floating_point()]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rep = explain_static(model, args, kwargs, target=target)
    except Exception as err:  # noqa: BLE001 - a model that fails is a row saying so, not a crash
        row.update(error=f"{type(err).__name__}: {err}".splitlines()[0][:300],
                   seconds=round(time.perf_counter() - t, 2))
        return row
    whole = [f.why for f in rep.fallbacks if f.op == "(whole model)"]
    if whole:  # nothing compiled: either eager cannot run the model in this dtype either, or a bug of ours
        try:
            zoo.run_eager(model, args, kwargs)
        except Exception as err:  # noqa: BLE001 - as the GPU zoo check does: not judged
            row.update(skipped=f"eager fails in {dtype_name}: {type(err).__name__}: {err}".splitlines()[0][:300])
            return row
        row.update(error=f"capture failed: {whole[0]}".splitlines()[0][:300], seconds=round(time.perf_counter() - t, 2))
        return row
    row.update(summarize(rep, torch.float64 in floats), seconds=round(time.perf_counter() - t, 2),
               capture_s=round(rep.timings.get("capture", 0.0), 2), compile_s=round(rep.timings.get("compile", 0.0), 2))
    row["goals"] = {g: bool(test(row)) for g, (_, models, test) in GOALS.items()
                    if (models is None or name in models) and not (g == "no-f64" and row["f64_kernels"] is None)}
    if vs_inductor:
        row.update(_inductor(name, dtype_name, row["bytes_moved"]))
    return row


def _inductor(name: str, dtype_name: str, ours: int) -> dict:
    from .inductor_bytes import inductor_bytes

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = inductor_bytes(*_load(name, dtype_name))  # a fresh copy: buffers as made, not as we left them
    except Exception as err:  # noqa: BLE001 - torch.compile failing on a model is a finding, not a crash
        return {"inductor_error": f"{type(err).__name__}: {err}".splitlines()[0][:200]}
    return {"inductor_bytes": got.bytes_moved, "inductor_kernels": got.kernels, "inductor_graphs": got.graphs,
            "vs_inductor": round(ours / max(1, got.bytes_moved), 4)}


def summarize(rep, float64_model: bool = False) -> dict:
    """The report's metrics of one `explain`/`explain_static` Report."""
    # float64 arithmetic: an f64 value computed, read or written (constants folded to f32 are not);
    # a float64 model computes in float64 by right, so it is not counted there
    f64 = [k.name for k in rep.kernels if any("f64" in ty for ty in k.compute_types)]
    soft = [k for k in rep.kernels if any(_op(o) in SOFTMAX for o, _ in k.ops)]
    kinds: dict[str, int] = {}
    for k in rep.kernels:
        kinds[k.kind] = kinds.get(k.kind, 0) + 1
    return dict(
        kernels=len(rep.kernels), bytes_moved=rep.bytes_moved, bytes_minimum=rep.bytes_minimum,
        ratio=round(rep.bytes_moved / max(1, rep.bytes_minimum), 4),
        f64_kernels=None if float64_model else len(f64), f64_names=f64,
        fallbacks=len(rep.fallbacks), fallback_ops=sorted({f.op for f in rep.fallbacks}),
        kinds=dict(sorted(kinds.items())),
        attention_fused=bool(soft) and all(k.kind == "attention" for k in soft))


def _work(task):
    return measure(*task)


def _one_thread():
    torch.set_num_threads(1)  # the workers share the cores: one op thread each


def measure_all(models: list[str], dtypes: list[str], jobs: int = 1, target: str = "interpret",
                vs_inductor: bool = False) -> list[dict]:
    tasks = [(m, d, target, vs_inductor) for d in dtypes for m in models]
    if jobs <= 1 or len(tasks) == 1:
        return [measure(*t) for t in tasks]
    # the slowest first (last report's seconds), so no worker is left alone with a long one at the end
    try:
        last = {(r["model"], r["dtype"]): r.get("seconds", 0.0)
                for r in json.loads((PERF / "kernel_report.json").read_text())["rows"]}
    except (OSError, ValueError, KeyError):
        last = {}
    order = sorted(range(len(tasks)), key=lambda i: -last.get(tasks[i][:2], 0.0))
    # fork: workers inherit the imported torch and uniorch instead of importing them again
    with multiprocessing.get_context("fork").Pool(jobs, initializer=_one_thread) as pool:
        done = pool.map(_work, [tasks[i] for i in order], chunksize=1)
    rows: list = [None] * len(tasks)
    for i, row in zip(order, done):
        rows[i] = row
    return rows


# -- ceilings --------------------------------------------------------------------------------------
def check(rows: list[dict], ceilings: dict) -> tuple[list[str], list[str]]:
    """(regressions, models without a ceiling): each regression names the model, dtype and metric."""
    bad, unbounded = [], []
    for r in rows:
        ceil = ceilings.get(r["dtype"], {}).get(r["model"])
        where = f"{r['model']} [{r['dtype']}]"
        if "skipped" in r:
            continue
        if ceil is None:
            unbounded.append(where)
            continue
        if "error" in r:
            bad.append(f"{where}: did not compile: {r['error']}")
            continue
        for metric in METRICS:
            got, limit = r.get(metric), ceil.get(metric)
            if got is not None and limit is not None and got > limit:
                bad.append(f"{where}: {metric} {_fmt(metric, got)} > ceiling {_fmt(metric, limit)}")
    return bad, unbounded


def _fmt(metric: str, v) -> str:
    return f"{v:.2f}x" if metric == "ratio" else str(v)


def new_ceilings(rows: list[dict], old: dict) -> dict:
    """Today's values as ceilings (the bytes ratio rounded up by 5 %); unmeasured entries stay."""
    out = {k: dict(v) for k, v in old.items() if not k.startswith("_")}
    for r in rows:
        if "error" in r or "skipped" in r:
            continue
        c = {m: r[m] for m in METRICS if r.get(m) is not None}
        c["ratio"] = math.ceil(r["ratio"] * RATIO_SLACK * 100) / 100
        out.setdefault(r["dtype"], {})[r["model"]] = c
    for d in out:
        out[d] = dict(sorted(out[d].items()))
    return {"_about": "per model and dtype, the most a change may reach (tools/kernel_report.py --check); "
                      "lower them as fusion improves", **out}


# -- output ----------------------------------------------------------------------------------------
def meta(seconds: float, target: str) -> dict:
    import triton

    def git(*a):
        try:
            return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs/perf"):
        commit += "+changes"
    return {"commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "torch": torch.__version__, "triton": triton.__version__, "target": target, "seconds": round(seconds, 1)}


def markdown(rows: list[dict], info: dict) -> str:
    inductor = any("inductor_bytes" in r or "inductor_error" in r for r in rows)
    lines = ["# Kernel report", "",
             f"Generated by `python -m uniorch.tools.kernel_report --write{' --vs-inductor' if inductor else ''}` "
             f"at commit {info['commit']} on "
             f"{info['date']} (torch {info['torch']}, triton {info['triton']}, target {info['target']}, "
             f"{info['seconds']} s). Static: compiled to Triton source, no kernel launched. Bytes moved are the "
             "kernels' reads and writes; the minimum reads each input and writes each output once.", "",
             "## Targets", "", "| goal | models | met |", "|---|---|---|"]
    for g, (what, models, _) in GOALS.items():
        judged = [r for r in rows if g in r.get("goals", {})]
        met = [f"{r['model']} [{r['dtype']}]" for r in judged if r["goals"][g]]
        missed = [f"{r['model']} [{r['dtype']}]" for r in judged if not r["goals"][g]]
        named = (f"; met: {', '.join(met)}" if len(met) <= len(missed) else f"; missed: {', '.join(missed)}") \
            if met and missed else ""
        lines.append(f"| {what} | {', '.join(models) if models else 'all'} | {len(met)}/{len(judged)}{named} |")
    if inductor:
        lines += ["", "## Against torch.compile", "",
                  "torch.compile (default mode, Inductor) compiled the same models here, and Inductor counted its "
                  "own bytes moved the same way: each buffer once per kernel, matmuls and convolutions included "
                  "as its extern calls (`tools/inductor_bytes.py`). Below 1x uniorch moves fewer bytes.", ""]
        lines += _versus(rows)
    lines += ["", "## Per model", "",
              "| model | dtype | kernels | MB moved | MB minimum | ratio | f64 kernels | fallbacks | kinds "
              "| goals missed |" + (" MB torch.compile | vs torch.compile |" if inductor else ""),
              "|---|---|---:|---:|---:|---:|---:|---:|---|---|" + ("---:|---:|" if inductor else "")]
    for r in rows:
        if "error" in r or "skipped" in r:
            why = f"error: {r['error']}" if "error" in r else f"skipped: {r['skipped']}"
            lines.append(f"| {r['model']} | {r['dtype']} | {why.replace('|', '/')} | | | | | | | |"
                         + (" | |" if inductor else ""))
            continue
        kinds = ", ".join(f"{k} {n}" for k, n in r["kinds"].items())
        missed = ", ".join(g for g, ok in r["goals"].items() if not ok) or "-"
        f64 = "-" if r["f64_kernels"] is None else r["f64_kernels"]
        lines.append(f"| {r['model']} | {r['dtype']} | {r['kernels']} | {r['bytes_moved'] / 1e6:.3f} | "
                     f"{r['bytes_minimum'] / 1e6:.3f} | {r['ratio']:.2f}x | {f64} | {r['fallbacks']} | {kinds} "
                     f"| {missed} |" + (_inductor_cells(r) if inductor else ""))
    return "\n".join(lines) + "\n"


def _inductor_cells(r: dict) -> str:
    if "inductor_bytes" not in r:
        return f" {r.get('inductor_error', '-').replace('|', '/')} | |"
    return f" {r['inductor_bytes'] / 1e6:.3f} | {r['vs_inductor']:.2f}x |"


def _versus(rows: list[dict]) -> list[str]:
    """Per dtype: geometric mean of uniorch / torch.compile bytes, with the best and worst models."""
    out = ["| dtype | models | geomean uniorch / torch.compile bytes | fewer bytes | most above |",
           "|---|---:|---:|---:|---|"]
    for d in dict.fromkeys(r["dtype"] for r in rows):
        got = [r for r in rows if r["dtype"] == d and "vs_inductor" in r]
        if not got:
            continue
        gm = math.exp(sum(math.log(r["vs_inductor"]) for r in got) / len(got))
        worst = sorted(got, key=lambda r: -r["vs_inductor"])[:3]
        out.append(f"| {d} | {len(got)} | {gm:.2f}x | {sum(r['vs_inductor'] < 1 for r in got)}/{len(got)} | "
                   + ", ".join(f"{r['model']} {r['vs_inductor']:.2f}x" for r in worst) + " |")
    return out


def _shown(path) -> str:
    """A path as the user would type it: relative when under the current folder."""
    rel = os.path.relpath(path)
    return str(path) if rel.startswith("..") else rel


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m uniorch.tools.kernel_report", description=__doc__.split("\n\n")[1])
    p.add_argument("--dtypes", default="fp32,bf16", help=f"comma-separated, of {', '.join(DTYPES)} (default fp32,bf16)")
    p.add_argument("--models", default="", help="comma-separated zoo models or probes (default: all)")
    p.add_argument("--target", default="interpret", help="target whose schedules and codegen are reported")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes (default ≤2)")
    p.add_argument("--write", nargs="?", const=str(PERF), metavar="DIR",
                   help="write kernel_report.md and .json to DIR (default docs/perf)")
    p.add_argument("--check", nargs="?", const=str(CEILINGS), metavar="CEILINGS",
                   help="exit 1 when a model exceeds its ceilings (default docs/perf/ceilings.json)")
    p.add_argument("--update-ceilings", nargs="?", const=str(CEILINGS), metavar="CEILINGS",
                   help="write today's values as the ceilings (ratio +5%%)")
    p.add_argument("--vs-inductor", action="store_true",
                   help="also compile each model with torch.compile and report Inductor's bytes moved (slower)")
    a = p.parse_args(argv)
    dtypes = [d for d in a.dtypes.split(",") if d]
    models = [m for m in a.models.split(",") if m] or names()
    unknown = [d for d in dtypes if d not in DTYPES] + [m for m in models if m not in names()]
    if unknown:
        p.error(f"unknown dtype or model: {', '.join(unknown)}")
    t = time.perf_counter()
    rows = measure_all(models, dtypes, a.jobs, a.target, a.vs_inductor)
    info = meta(time.perf_counter() - t, a.target)
    text = markdown(rows, info)
    print(text)
    if a.write:
        out = Path(a.write)
        out.mkdir(parents=True, exist_ok=True)
        (out / "kernel_report.md").write_text(text)
        (out / "kernel_report.json").write_text(json.dumps({**info, "rows": rows}, indent=1) + "\n")
    if a.update_ceilings:
        path = Path(a.update_ceilings)
        old = json.loads(path.read_text()) if path.is_file() else {}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(new_ceilings(rows, old), indent=1) + "\n")
        print(f"kernel report: ceilings written to {_shown(path)}")
    status = 0
    if a.check:
        bad, unbounded = check(rows, json.loads(Path(a.check).read_text()))
        a.check = _shown(a.check)
        if unbounded:
            print(f"kernel report: no ceiling yet for {', '.join(unbounded)} (add with --update-ceilings)")
        if bad:
            print(f"kernel report: {len(bad)} regression(s) against {a.check}:\n  " + "\n  ".join(bad)
                  + "\nFix the regression, or if it is intended, raise the ceiling in that file and say why "
                    "in the commit.", file=sys.stderr)
            status = 1
        else:
            print(f"kernel report: every model within its ceilings ({a.check})")
    print(f"kernel report: {len(rows)} model runs in {info['seconds']} s", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
