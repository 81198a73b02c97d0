"""Roofline PNG: where each workload (and each uniorch kernel that has a time) sits against the
two peaks measured in the same run. matplotlib is an optional extra, imported only here."""
from __future__ import annotations


def plot(result: dict, path: str) -> str | None:
    """Writes `path`; returns None, or why no PNG was written."""
    try:
        import matplotlib
        matplotlib.use("Agg")   # headless: benchmark machines have no display
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: pip install -e '.[bench]' (the `bench` extra) for the roofline PNG"
    gbps, tflops = result["peak_copy_GBps"], result["peak_bf16_tflops"]
    rows = [r for r in result["results"] if r.get("uniorch_ms")]
    fig, (ax_bw, ax_rf) = plt.subplots(1, 2, figsize=(15, 6))

    labels = [f"{r['model']}/{r['dtype']}" for r in rows]
    ax_bw.barh(labels, [r.get("achieved_GBps") or 0 for r in rows], color="tab:blue")
    labelled = False
    for i, r in enumerate(rows):   # each uniorch kernel with a profiled time, on its workload's row
        kx = [k["bytes"] / (k["ms"] * 1e-3) / 1e9 for k in (r.get("kernel_stats") or []) if k.get("ms")]
        if kx:
            ax_bw.scatter(kx, [i] * len(kx), marker="x", color="tab:orange", s=18,
                          label=None if labelled else "one uniorch kernel (profiled)")
            labelled = True
    ax_bw.axvline(gbps, color="k", label=f"measured copy {gbps:.0f} GB/s")
    ax_bw.axvline(0.85 * gbps, color="k", ls="--", label="85% of copy (goal for fused memory-bound kernels)")
    ax_bw.set_xlabel("uniorch achieved GB/s (explain's bytes moved / median time)")
    ax_bw.legend(loc="lower right", fontsize=8)

    # classic roofline: attainable TFLOP/s = min(peak, intensity * bandwidth)
    pts = [(r["flops"] / r["bytes_moved"], r["achieved_TFLOPs"], f"{r['model']}/{r['dtype']}")
           for r in rows if r.get("flops") and r.get("bytes_moved") and r.get("achieved_TFLOPs")]
    lo = min([p[0] for p in pts] + [0.1]) / 2
    hi = max([p[0] for p in pts] + [tflops * 1e3 / gbps * 4])
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax_rf.loglog(xs, [min(tflops, x * gbps / 1e3) for x in xs], "k-",
                 label=f"roof: copy {gbps:.0f} GB/s, bf16 matmul {tflops:.1f} TFLOP/s")
    for x, y, name in pts:
        ax_rf.scatter([x], [y])
        ax_rf.annotate(name, (x, y), fontsize=7)
    ax_rf.set_xlabel("arithmetic intensity (FLOP / byte moved)")
    ax_rf.set_ylabel("achieved TFLOP/s")
    ax_rf.legend(loc="upper left", fontsize=8)
    fig.suptitle(f"uniorch on {result['device']} ({result['date']}, commit {str(result['commit'])[:10]})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
