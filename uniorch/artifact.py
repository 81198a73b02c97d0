"""What ahead-of-time compilation produces (`Artifact`, `AotKernel`) and how a compiled region's
kernels go through a backend's stages. Its own module so that the ONNX frontend's AOT path builds
artifacts without importing `uniorch.aot`, which calls it."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class AotKernel:
    name: str  # "k0_pointwise", or "r1.k0_pointwise" when the program has several regions
    kind: str
    region: int
    asm: dict[str, Any] = field(repr=False)  # stage -> text, or bytes for binaries; "triton", "ttir" first
    metadata: dict[str, Any] = field(repr=False)  # what the backend's stages recorded (JSON-able)
    ops: list[str] = field(default_factory=list)  # the ATen ops fused into it
    source: Any = field(default=None, repr=False)  # uniorch KernelSource: how to launch it
    func: str = ""  # its function's symbol in the region's scheduled MLIR
    compiled: Any = field(default=None, repr=False)  # the backend's CompiledKernel
    # the same kernel compiled for the arguments the region launches it with (aligned, innermost
    # strides 1: vector loads), as Triton's JIT would; a launch whose arguments differ runs
    # `compiled`. None where the backend does not specialize or the arguments were not known
    specialized: Any = field(default=None, repr=False)

    @property
    def stages(self) -> list[str]:
        return list(self.asm)


@dataclass
class Artifact:
    """What `compile_aot` returns: every kernel at every stage, plus what `save` writes."""

    target: str
    kernels: list[AotKernel]
    fallbacks: list  # uniorch.api.FallbackReport: op, where, stage, why
    timings: dict[str, float]
    captured: Any = field(repr=False, default=None)  # CapturedGraph
    program: Any = field(repr=False, default=None)  # runtime.partition.Program (regions not loaded)

    def save(self, path: str) -> str:
        """Writes the bundle directory `path` (replacing a bundle already there); returns it."""
        from .runtime.bundle import save

        return save(self, path)

    def __str__(self) -> str:
        regions = len(self.program.regions) if self.program is not None else 0
        lines = [f"uniorch AOT artifact (target {self.target}): {len(self.kernels)} kernels in {regions} "
                 f"compiled region(s), {len(self.fallbacks)} eager fallbacks", "",
                 f"{'kernel':<28} {'kind':<12} {'binary':>14}  stages"]
        for k in self.kernels:
            last = k.stages[-1]
            size = f"{last} {len(k.asm[last]) / 1024:.1f} KB" if isinstance(k.asm[last], bytes) else "-"
            lines.append(f"{k.name:<28} {k.kind:<12} {size:>14}  {' '.join(k.stages)}")
        if self.fallbacks:
            lines += ["", "eager fallbacks (op, where, why):"]
            lines += [f"  {f.op:<28} {f.where:<40} [{f.stage}] {f.why}" for f in self.fallbacks]
        lines += ["", "timings: " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in self.timings.items())]
        return "\n".join(lines)


def through_backend(cg, target, all_nodes: list[str]):
    """Every kernel of a compiled (not loaded) region through the backend's stages to its last."""
    from .backends.driver import compile_kernel
    from .backends.sdk import BackendError
    from .codegen.patterns import schedule_text
    from .runtime.compiler import RegionError
    from .runtime.resources import refit, shared_limit
    from .backends.specialization import recorded, specialize

    backend = target.backend
    limit = shared_limit(target)
    t = time.perf_counter()
    specs = recorded(cg.plan, cg.input_specs) if backend.specializes_aot else {}
    kernels = [cg.plan.kernels[info.name] for info in cg.kernels]
    # the MLIR text each kernel's stages may read, taken here: nothing below touches the module
    texts = [_linalg_text(k.func_op) for k in kernels]
    jobs = [(k.source, text) for k, text in zip(kernels, texts)]
    special_at: dict[int, int] = {}  # kernel -> its specialized compile's job
    for n, (k, text) in enumerate(zip(kernels, texts)):
        if specs.get(k.name) is not None and not k.source.symbols:
            special_at[n] = len(jobs)
            jobs.append((specialize(k.source, specs[k.name]), text))
    done = _compile_all(jobs, backend)
    for n, (info, kernel) in enumerate(zip(cg.kernels, kernels)):
        try:
            ck = done[n]
            if isinstance(ck, BackendError):
                raise ck
            # over the arch's shared memory it would fail at its first launch there: smaller, as
            # the trial launch does against the driver's limit (runtime/resources.py)
            resized = False
            while limit is not None and int(ck.metadata.get("shared") or 0) > limit:
                if refit(kernel, str(target), need=int(ck.metadata.get("shared") or 0), limit=limit) is None:
                    raise BackendError(f"{target}: kernel {info.name} needs {ck.metadata.get('shared')} bytes of "
                                       f"shared memory at its smallest tiles; {target.arch} has {limit}")
                info.source, info.schedule = kernel.source.source, schedule_text(kernel.func_op)
                ck = compile_kernel(kernel.source, backend, linalg=_linalg_text(kernel.func_op))
                resized = True
            cg.compiled[info.name] = ck
            if n in special_at:
                special = _specialized(kernel, specs[info.name], backend, limit) if resized else \
                    _fits(done[special_at[n]], limit)
                if special is not None:
                    cg.specialized[info.name] = special
        except BackendError as err:
            raise RegionError("backend", str(err), info.nodes or all_nodes) from None
    cg.timings["backend stages"] = time.perf_counter() - t
    return cg


def _compile_all(jobs: list, backend) -> list:
    """Each (KernelSource, linalg text) through the backend's stages: its CompiledKernel, or the
    BackendError it raised. In threads where the backend allows (`compiles_in_threads`): two
    threads compile gpt2_block's kernels for sm_90 1.7x faster than one on a 2-core machine.
    Kernels that are the same code but for their names (repeated layers) compile once where the
    backend allows it (`shares_kernels`)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from .backends.driver import compile_kernel, shared_as, sharing_key
    from .backends.sdk import BackendError

    def one(job):
        try:
            return compile_kernel(job[0], backend, linalg=job[1])
        except BackendError as err:
            return err

    first: dict = {}  # what a compile depends on, but the kernel's name -> its first job
    same = [first.setdefault(sharing_key(ks), n) if backend.shares_kernels else n for n, (ks, _) in enumerate(jobs)]
    todo = sorted(set(same))
    workers = min(8, os.cpu_count() or 1, len(todo))
    if workers < 2 or not getattr(backend, "compiles_in_threads", False):
        done = dict(zip(todo, map(one, (jobs[n] for n in todo))))
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            done = dict(zip(todo, pool.map(one, (jobs[n] for n in todo))))
    return [done[n] if m == n else shared_as(done[m], jobs[n][0]) for n, m in enumerate(same)]


def _fits(ck, limit):
    """A specialized compile, unless it failed or needs more shared memory than the arch has."""
    from .backends.sdk import BackendError

    if isinstance(ck, BackendError) or (limit is not None and int(ck.metadata.get("shared") or 0) > limit):
        return None
    return ck


def _specialized(kernel, spec: list, backend, limit):
    """The kernel compiled for its recorded arguments, as Triton's JIT would compile it; None
    where that fails or needs more shared memory than the arch has (the generic form then runs
    every launch)."""
    from .backends.driver import compile_kernel
    from .backends.sdk import BackendError
    from .backends.specialization import specialize

    try:
        ck = compile_kernel(specialize(kernel.source, spec), backend, linalg=_linalg_text(kernel.func_op))
    except BackendError:
        return None
    if limit is not None and int(ck.metadata.get("shared") or 0) > limit:
        return None
    return ck


def _linalg_text(func_op) -> str:
    """The kernel function as MLIR text with its locations (what linalg-consuming toolchains read)."""
    return func_op.get_asm(enable_debug_info=True) if func_op is not None else ""
