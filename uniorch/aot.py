"""Ahead-of-time compilation: build a model for a target this machine lacks, save it, load it there.

    art = uniorch.compile_aot(model, (x,), target="rocm:gfx942")   # no device needed
    art.kernels[0].asm["hsaco"]; print(art); art.save("bundle")
    fn = uniorch.load("bundle")                                     # on the target machine
    out = fn(x)                                                     # no capture, passes or codegen

Compiling is `uniorch.compile`'s path with the real target (schedules depend on it), stopped
after codegen, with every kernel then taken through the backend's stages to its last one. A
kernel that fails anywhere on that path makes its ATen ops run eagerly, as in `compile`; those
are `art.fallbacks`. The bundle format is `uniorch.runtime.bundle`.
"""
from __future__ import annotations

import time
from typing import Any, Optional

from .artifact import AotKernel, Artifact, through_backend

__all__ = ["compile_aot", "load", "Artifact", "AotKernel"]


def compile_aot(model_or_fn: Any, args: Any = (), target: str = "auto", kwargs: Optional[dict] = None, *,
                fallback: str = "eager", dynamic: Optional[bool] = None) -> Artifact:
    """Compiles `model_or_fn(*args, **kwargs)` for `target` without needing its device.

    fallback: "eager" runs what cannot be compiled in PyTorch (listed in `.fallbacks`); "error"
    raises instead. dynamic: True makes every input dim of size 2 or more a symbolic size (the
    bundle then serves every size in its range: the manifest's "symbols"); with None or False only
    dims marked by `torch._dynamo.mark_dynamic` on `args` are.
    """
    from .capture import capture
    from .runtime.partition import compile_program
    from .targets import parse_target

    if fallback not in ("eager", "error"):
        raise ValueError(f"fallback must be 'eager' or 'error', not {fallback!r}")
    tgt = parse_target(target)
    from .frontends.onnx import is_onnx

    if is_onnx(model_or_fn):
        from .frontends.onnx_aot import compile_onnx_aot

        return compile_onnx_aot(model_or_fn, args, tgt, kwargs)
    if dynamic not in (None, True, False):
        raise ValueError(f"dynamic must be None, True or False, not {dynamic!r}")
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    timings: dict[str, float] = {}
    t = time.perf_counter()
    captured = capture(model_or_fn, args, kwargs, dynamic=_dynamic_dims(args, kwargs or {}, dynamic))
    timings["capture"] = time.perf_counter() - t
    t = time.perf_counter()
    program = compile_program(captured.graph_module, tgt, fallback, compile_region=_compile_region)
    timings["compile"] = time.perf_counter() - t
    timings.update({k: v for k, v in program.timings.items()})
    return Artifact(str(tgt), _kernels(captured, program), _fallbacks(captured, program), timings, captured, program)


def _dynamic_dims(args: tuple, kwargs: dict, dynamic: Optional[bool]) -> Optional[dict]:
    from .runtime.guards import every_dim, marked_dims

    dims = every_dim(args, kwargs) if dynamic else {}
    for i, marked in marked_dims(args, kwargs).items():
        dims.setdefault(i, set()).update(marked)
    return dims or None


def _compile_region(gm, target, kernel_prefix: str = ""):
    """One region to its scheduled MLIR and generated kernels, then each kernel through every stage
    of the backend; a stage that fails makes that kernel's ATen ops eager, like a codegen failure."""
    from .runtime.compiler import compile_graph

    cg = compile_graph(gm, target, run=False, kernel_prefix=kernel_prefix)
    return through_backend(cg, target, [n.name for n in gm.graph.nodes if n.op == "call_function"])


def _kernels(captured, program) -> list[AotKernel]:
    nodes = {n.name: n for n in captured.graph_module.graph.nodes}
    out = []
    for r, region in enumerate(program.regions):
        for info in region.kernels:
            ck = region.compiled[info.name]
            name = info.name  # unique in the program: compile_program names each region's kernels apart
            ops = [str(nodes[n].target) for n in info.nodes if n in nodes]
            out.append(AotKernel(name, info.kind, r, dict(ck.asm), dict(ck.metadata), ops, ck.source, info.name,
                                 ck, region.specialized.get(info.name)))
    return out


def _fallbacks(captured, program) -> list:
    from .report import FallbackReport
    from .capture.locations import node_source_loc

    nodes = {n.name: n for n in captured.graph_module.graph.nodes}
    return [FallbackReport(op, str(node_source_loc(nodes[n])) if n in nodes else "?", f.stage, f.reason)
            for f in program.fallbacks for n, op in zip(f.nodes, f.ops)]


def load(path: str, model: Any = None, *, check_versions: bool = True):
    """The model saved by `Artifact.save(path)`, ready to run on its target's device.

    Nothing is recompiled: kernels come from the saved stages (the backend's binary, or the source
    for `interpret`), launch plans from each region's saved scheduled MLIR. Weights are the saved
    ones, or read live from `model` (an nn.Module with the same parameter names) when given.
    """
    from .runtime.bundle import load as load_bundle

    return load_bundle(path, model=model, check_versions=check_versions)
