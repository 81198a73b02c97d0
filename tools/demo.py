"""The main job: compile an example model with uniorch, run it, cross-compile it, print a summary.

    python -m uniorch.tools.demo [model.py:factory]

1. capture → linalg → fused Triton kernels, run on the best target present (`cpu` on a machine
   without a GPU backend) and checked against eager PyTorch on fresh inputs;
2. the model cross-compiled ahead of time (`uniorch.compile_aot`) for NVIDIA (sm_90: TTIR → TTGIR →
   LLIR → PTX, checked by ptxas → cubin), AMD (gfx942: … → AMDGCN → HSACO) and Ascend (its adapter's
   linalg, then the CANN hand-off), no device needed.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch
import torch.utils._pytree as pytree

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.join(os.path.dirname(HERE), "examples", "transformer_block.py") + ":make"
CROSS = ("cuda:sm_90", "rocm:gfx942", "cann:ascend910b")


def _fresh_like(tree):
    return pytree.tree_map(
        lambda a: torch.randn_like(a) if isinstance(a, torch.Tensor) and a.is_floating_point() else a, tree)


def _max_rel_err(got, ref) -> float:
    errs = [float((g - r).abs().max() / (r.abs().max() + 1e-12))
            for g, r in zip(pytree.tree_leaves(got), pytree.tree_leaves(ref)) if isinstance(r, torch.Tensor)]
    return max(errs, default=0.0)


def cross_compile(model, args, kwargs, target: str):
    """`uniorch.compile_aot` for a target this machine may lack: (artifact, seconds)."""
    import uniorch

    t = time.perf_counter()
    art = uniorch.compile_aot(model, args, target=target, kwargs=kwargs)
    return art, time.perf_counter() - t


def _final_stage(art) -> tuple[str, int]:
    if not art.kernels:
        return "-", 0
    last = art.kernels[0].stages[-1]
    return last, sum(len(k.asm[last]) for k in art.kernels)


def _ptxas(art) -> tuple[int, int]:
    """(accepted, total): NVIDIA's ptxas run on every PTX, independently of the cubin stage."""
    from uniorch.backends.cuda.ptxas import ptxas_tools, run_ptxas

    ptx = [k.asm["ptx"] for k in art.kernels if "ptx" in k.asm]
    if not ptx or not ptxas_tools():
        return 0, 0
    arch = art.target.split(":")[1]
    return sum(run_ptxas(text, arch).returncode == 0 for text in ptx), len(ptx)


def main(argv=None) -> int:
    import uniorch
    from uniorch.tools.model_source import ModelSource, SourceError

    p = argparse.ArgumentParser(prog="uniorch-demo", description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", default=DEFAULT_MODEL, help="model.py:factory (default: the example block)")
    a = p.parse_args(argv)
    src = ModelSource.parse(a.model)
    if src is None:
        print(f"uniorch-demo: error: expected model.py:factory, got '{a.model}'", file=sys.stderr)
        return 1
    try:
        model, args, kwargs = src.load()
    except SourceError as err:
        print("\n".join(d.render() for d in err.diags), file=sys.stderr)
        return 1

    cm = uniorch.compile(model, target="auto")
    t = time.perf_counter()
    rep = cm.explain(*args, **kwargs)
    compile_s = time.perf_counter() - t
    fresh = _fresh_like((args, kwargs))
    with torch.no_grad():
        ref = model(*fresh[0], **fresh[1])
        t = time.perf_counter()
        got = cm(*fresh[0], **fresh[1])
        run_s = time.perf_counter() - t
    err = _max_rel_err(got, ref)

    print(f"uniorch demo: {src.path}:{src.factory} ({type(model).__name__}) on target {cm.target}")
    print(f"  compiled in {compile_s:.1f} s: {len(rep.kernels)} kernels for {rep.captured_ops} ATen ops, "
          f"{100 * rep.compiled_fraction:.0f}% of ops in kernels, {len(rep.fallbacks)} eager fallbacks")
    print(f"  bytes moved {rep.bytes_moved / 1e6:.3f} MB vs minimum {rep.bytes_minimum / 1e6:.3f} MB "
          f"({rep.bytes_moved / max(1, rep.bytes_minimum):.2f}x)")
    print(f"  ran in {run_s * 1e3:.0f} ms; max relative error vs eager on fresh inputs: {err:.2e}")
    ok = err <= 1e-4
    for target in CROSS:
        try:
            art, secs = cross_compile(model, args, kwargs, target)
            stage, size = _final_stage(art)
            passed, total = _ptxas(art)
            check = f", ptxas {passed}/{total} ok" if total else ""
            ok = ok and passed == total
            print(f"  cross-compiled for {target:<17} {len(art.kernels)} kernels → {stage}, {size / 1e3:.0f} kB, "
                  f"{len(art.fallbacks)} eager fallbacks{check}, {secs:.1f} s")
        except Exception as exc:  # report and go on: one vendor's failure must not hide the others
            ok = False
            print(f"  cross-compiling for {target} FAILED: {type(exc).__name__}: {exc}")
    print("  result: " + ("OK" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
