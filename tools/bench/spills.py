"""Registers and spills of the benchmark's kernels on a GPU arch, from ptxas, without a GPU.

`python -m uniorch.tools.bench.spills [--target cuda:sm_90] [--sizes gpu] [workload ...]`
compiles each inference workload ahead of time (fp32 and bf16, the kernels Triton's JIT would
compile for the recorded arguments where there are) and runs `ptxas -v` on each kernel's PTX with
the ptxas that reads it (backends/cuda/ptxas.py): registers per thread and bytes spilled. A kernel
that spills in its main loop is slow on the device whatever its tiles: H200 run 6's gpt2_block fp32
attention took 1.66 ms against 0.89 for a larger attention that did not spill, and this is how it
was found. Run it with the GPU machine's Triton (3.6): its ptxas decides there.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import warnings


def kernel_rows(workload: str, dtype: str, target: str = "cuda:sm_90", sizes: str = "gpu") -> list[dict]:
    """One row per kernel of the workload: name, kind, registers, spilled bytes (stores)."""
    import torch

    import uniorch
    from uniorch.backends.cuda.ptxas import run_ptxas

    from .workloads import WORKLOADS

    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    fn, args = WORKLOADS[workload].make("cpu", torch_dtype, sizes=sizes)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        art = uniorch.compile_aot(fn, args, target=target)
    arch = target.split(":", 1)[1]
    rows = []
    for k in art.kernels:
        run = run_ptxas((k.specialized or k).asm["ptx"], arch, "-v")
        text = run.stdout + run.stderr
        regs = re.findall(r"Used (\d+) registers", text)
        rows.append(dict(workload=workload, dtype=dtype, kernel=k.name, kind=k.kind,
                         registers=int(regs[0]) if regs else None,
                         spilled=sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", text)),
                         tiles={n: v for n, v in k.source.constexprs.items() if n.startswith("BLOCK")},
                         error=None if run.returncode == 0 else run.stderr[-300:]))
    return rows


def main(argv=None) -> int:
    from .workloads import WORKLOADS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workloads", nargs="*", help="default: every inference workload")
    ap.add_argument("--target", default="cuda:sm_90")
    ap.add_argument("--sizes", default="gpu", choices=["gpu", "cpu"])
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args(argv)
    names = a.workloads or [n for n, w in WORKLOADS.items() if w.kind != "train"]
    rows = []
    for name in names:
        for dtype in WORKLOADS[name].dtypes:
            for r in kernel_rows(name, dtype, a.target, a.sizes):
                rows.append(r)
                flag = "  SPILLS" if r["spilled"] else ""
                print(f"{name:18} {dtype:5} {r['kernel']:22} {r['kind']:12} {str(r['registers']):>4} regs "
                      f"{r['spilled']:6d} B spilled {r['tiles']}{flag}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    bad = [r for r in rows if r["spilled"]]
    print(f"{len(bad)} of {len(rows)} kernels spill", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
