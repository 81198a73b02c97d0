"""Registers and spills of the benchmark's kernels on a GPU arch, from ptxas, without a GPU.

`python -m uniorch.tools.bench.spills [--target cuda:sm_90] [--sizes gpu] [--train] [workload ...]`
compiles each inference workload (and with --train, or by name, each training step's forward and
backward graphs, rows `fwd.`/`bwd.`) ahead of time (fp32 and bf16, the kernels Triton's JIT would
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

    from .fp32 import exact_fp32
    from .workloads import WORKLOADS

    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    fn, args = WORKLOADS[workload].make("cpu", torch_dtype, sizes=sizes)
    if WORKLOADS[workload].kind == "train":
        halves = training_halves(fn, args)
    else:
        halves = [("", fn, args)]
    arch = target.split(":", 1)[1]
    rows = []
    for half, f, a in halves:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with exact_fp32():  # the benchmark's settings: its fp32 convolutions are exact
                art = uniorch.compile_aot(f, a, target=target)
        rows += _rows(art, workload, dtype, arch, half, run_ptxas)
    return rows


def training_halves(model, args) -> list:
    """[("fwd" | "bwd", FX graph, example inputs)]: a training step's forward and backward as
    uniorch's training path gets them (AOTAutograd, min-cut partition), the loss the benchmark's
    (mean square). On a CPU SDPA's backward is the math decomposition (a GPU keeps PyTorch's
    kernel), so the backward's attention part differs from the GPU's; the rest is the same."""
    import torch
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from uniorch.runtime.training import _inline_composite_ops, _views_as_reshapes, partition

    got = []

    def stash(half):
        def compile_half(gm, example_inputs):
            _views_as_reshapes(gm)
            _inline_composite_ops(gm)
            with unset_fake_temporarily():
                real = [torch.randn(e.shape, dtype=e.dtype) if e.is_floating_point()
                        else torch.zeros(e.shape, dtype=e.dtype) for e in example_inputs]
            n = sum(h.startswith(half) for h, _, _ in got)  # graphs after a graph break: fwd1, bwd1
            got.append((f"{half}{n or ''}", gm, tuple(real)))
            return make_boxed_func(gm.forward)
        return compile_half

    backend = aot_autograd(fw_compiler=stash("fwd"), bw_compiler=stash("bwd"),
                           partition_fn=partition)
    torch._dynamo.reset()
    model.train()
    torch.compile(model, backend=backend)(*args).float().pow(2).mean().backward()
    torch._dynamo.reset()
    return got


def _rows(art, workload: str, dtype: str, arch: str, half: str, run_ptxas) -> list[dict]:
    rows = []
    for k in art.kernels:
        run = run_ptxas((k.specialized or k).asm["ptx"], arch, "-v")
        text = run.stdout + run.stderr
        regs = re.findall(r"Used (\d+) registers", text)
        rows.append(dict(workload=workload, dtype=dtype, kernel=f"{half}.{k.name}" if half else k.name, kind=k.kind,
                         registers=int(regs[0]) if regs else None,
                         spilled=sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", text)),
                         tiles={n: v for n, v in k.source.constexprs.items() if n.startswith("BLOCK")},
                         error=None if run.returncode == 0 else run.stderr[-300:]))
    return rows


def main(argv=None) -> int:
    from .workloads import WORKLOADS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workloads", nargs="*", help="default: every inference workload (with --train, every one)")
    ap.add_argument("--train", action="store_true", help="also the training workloads: forward and backward graphs")
    ap.add_argument("--target", default="cuda:sm_90")
    ap.add_argument("--sizes", default="gpu", choices=["gpu", "cpu"])
    ap.add_argument("--json", help="also write the rows here")
    a = ap.parse_args(argv)
    names = a.workloads or [n for n, w in WORKLOADS.items() if a.train or w.kind != "train"]
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
