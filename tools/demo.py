"""The main job: take an example model through every stage uniorch has and print a summary.

    python -m uniorch.tools.demo [model.py:factory]

Today that is capture → MLIR (torch, linalg) → a numerics check of the captured graph against eager
on fresh inputs on the best device present. Kernel codegen and the vendor backends are not built
yet; the summary says so instead of pretending.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time

import torch
import torch.utils._pytree as pytree

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.join(os.path.dirname(HERE), "examples", "transformer_block.py") + ":make"


def best_device() -> str:
    if torch.cuda.is_available():
        return "cuda"  # NVIDIA or ROCm builds of torch both answer here
    return "cpu"


def _fresh_like(args):
    return pytree.tree_map(
        lambda a: torch.randn_like(a) if isinstance(a, torch.Tensor) and a.is_floating_point() else a, args
    )


def main(argv=None) -> int:
    from torch_mlir import ir

    from uniorch.capture import capture
    from uniorch.ir import import_captured, lower
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

    device = best_device()
    rows = []
    t = time.perf_counter()
    cg = capture(model, args, kwargs)
    rows.append(("capture", f"{len(cg.ops)} core ATen ops, {sum(i.kind != 'user' for i in cg.inputs)} lifted params/buffers",
                 time.perf_counter() - t))
    t = time.perf_counter()
    module = import_captured(cg)
    lower(module, "torch")
    rows.append(("import → torch dialect", f"{_count_ops(module, 'torch.')} torch ops", time.perf_counter() - t))
    t = time.perf_counter()
    lower(module, "linalg")
    rows.append(("lower → linalg-on-tensors", f"{_count_ops(module, 'linalg.')} linalg ops", time.perf_counter() - t))
    ir.Module.parse(str(module), module.context)  # the graph must survive a print/parse round trip

    model = model.to(device)
    fresh = pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, _fresh_like((args, kwargs)))
    with torch.no_grad():
        ref = model(*fresh[0], **fresh[1])
        got = cg(*fresh[0], **fresh[1])
    err = max((float((g - r).abs().max() / (r.abs().max() + 1e-12))) for g, r in
              zip(pytree.tree_leaves(got), pytree.tree_leaves(ref)) if isinstance(r, torch.Tensor))
    rows.append((f"run captured graph on {device}", f"max rel. error vs eager {err:.2e} on fresh inputs", 0.0))

    print(f"uniorch demo: {src.path}:{src.factory} ({type(model).__name__}), device: {device}")
    for stage, what, secs in rows:
        print(f"  {stage:<34} {what:<56} {secs * 1e3:8.1f} ms" if secs else f"  {stage:<34} {what}")
    ops = collections.Counter(op.target for op in cg.ops)
    print("  most frequent ATen ops: " + ", ".join(f"{k.removeprefix('aten.')}×{v}" for k, v in ops.most_common(6)))
    print("  not built yet: fusion/scheduling, Triton codegen, vendor backends (cuda, rocm, cann, interpret);"
          " no cross-compilation happens in this version")
    ok = err <= 1e-4
    print("  result: " + ("OK" if ok else "MISMATCH against eager"))
    return 0 if ok else 1


def _count_ops(module, prefix: str) -> int:
    from torch_mlir import ir

    n = [0]

    def visit(op):
        n[0] += op.name.startswith(prefix)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return n[0]


if __name__ == "__main__":
    sys.exit(main())
