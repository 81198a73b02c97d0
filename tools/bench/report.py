"""The console table and the summary numbers the issue's goals are judged by."""
from __future__ import annotations

import math


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def speedups(rows: list[dict], base: str, new: str = "uniorch") -> list[float]:
    """base_ms / new_ms per row where both ran and uniorch's answer was right (a wrong answer's
    speed is not a speedup)."""
    out = []
    for r in rows:
        b, n = r.get(f"{base}_ms"), r.get(f"{new}_ms")
        if b and n and (new != "uniorch" or r.get("correct")):
            out.append(b / n)
    return out


def summary(rows: list[dict], peak_copy_GBps: float) -> dict:
    mem = [r["achieved_GBps"] / peak_copy_GBps for r in rows
           if r.get("kind") == "micro" and not r.get("flops") and r.get("achieved_GBps") and r.get("correct")]
    cold = [r["inductor_compile_s"] / r["uniorch_compile_s"] for r in rows
            if r.get("inductor_compile_s") and r.get("uniorch_compile_s")]
    return dict(
        geomean_uniorch_vs_eager=geomean(speedups(rows, "eager")),
        geomean_uniorch_vs_inductor=geomean(speedups(rows, "inductor")),
        geomean_uniorch_vs_inductor_max_autotune=geomean(speedups(rows, "inductor_max_autotune")),
        geomean_inductor_vs_eager=geomean(speedups(rows, "eager", "inductor")),
        # memory-bound microbenchmarks (no matmul FLOPs): fraction of the measured copy bandwidth
        min_memory_bound_fraction_of_copy=min(mem) if mem else None,
        geomean_cold_compile_inductor_over_uniorch=geomean(cold),
        correct=sum(1 for r in rows if r.get("correct")), rows=len(rows),
    )


def _f(v, fmt: str) -> str:
    width = "".join(c for c in fmt.split(".")[0] if c.isdigit())
    return format("-" if v is None else format(v, fmt), f">{width}") if width else ("-" if v is None else format(v, fmt))


def _ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def table(rows: list[dict], peak_copy_GBps: float) -> str:
    head = (f"{'model':<18} {'dtype':<5} {'eager':>9} {'inductor':>9} {'max-at':>9} {'uniorch':>9} "
            f"{'vs eager':>8} {'vs ind':>7} {'krn':>4} {'ok':>3} {'uni cc s':>8} {'ind cc s':>8} {'GB/s':>8} {'%copy':>6}")
    lines = [head, "-" * len(head)]
    for r in rows:
        ok = {True: "yes", False: "NO", None: "-"}[r.get("correct")]
        gbps = r.get("achieved_GBps")
        lines.append(
            f"{r['model']:<18} {r['dtype']:<5} {_f(r['eager_ms'], '9.3f')} {_f(r['inductor_ms'], '9.3f')} "
            f"{_f(r['inductor_max_autotune_ms'], '9.3f')} {_f(r['uniorch_ms'], '9.3f')} "
            f"{_ratio(r['eager_ms'], r['uniorch_ms']):>8} {_ratio(r['inductor_ms'], r['uniorch_ms']):>7} "
            f"{_f(r['kernels'], '4d')} {ok:>3} {_f(r['uniorch_compile_s'], '8.2f')} "
            f"{_f(r['inductor_compile_s'], '8.2f')} {_f(gbps, '8.1f')} "
            f"{(f'{gbps / peak_copy_GBps * 100:5.0f}%' if gbps and peak_copy_GBps else '-'):>6}")
        for backend, msg in r.get("errors", {}).items():
            lines.append(f"    {backend}: {msg[:150]}")
    s = summary(rows, peak_copy_GBps)
    lines += ["", "times in ms (median); 'vs eager'/'vs ind' = that backend's time / uniorch's (>1: uniorch faster)",
              f"geomean speedup of uniorch: vs eager {_f(s['geomean_uniorch_vs_eager'], '.2f')}x, "
              f"vs torch.compile {_f(s['geomean_uniorch_vs_inductor'], '.2f')}x, "
              f"vs max-autotune {_f(s['geomean_uniorch_vs_inductor_max_autotune'], '.2f')}x "
              f"(torch.compile vs eager {_f(s['geomean_inductor_vs_eager'], '.2f')}x)",
              f"uniorch correct on {s['correct']}/{s['rows']} rows; cold compile torch.compile/uniorch "
              f"geomean {_f(s['geomean_cold_compile_inductor_over_uniorch'], '.2f')}x"]
    return "\n".join(lines)
