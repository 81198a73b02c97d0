"""What `explain` returns: the kernels, fallbacks, bytes and timings of a compile.

Its own module so that the frontends and the optimizer path build reports without importing the
public API (which imports them)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class KernelReport:
    name: str
    kind: str
    ops: list[tuple[str, str]]  # (ATen op, "module.path @ file:line")
    schedule: dict
    bytes_read: int
    bytes_written: int
    source: str = field(repr=False, default="")
    # element types the kernel reads, writes or computes ("f32", "i64", "f64", ...), from its MLIR function
    compute_types: tuple[str, ...] = ()
    # how the target runs it where that differs from its own path (the launcher's `note`, e.g. the
    # cpu backend's "runs on Triton's interpreter: <why>"); "" otherwise
    note: str = ""
    # bytes of parameters' layout copies before it, each way: in bytes_read and bytes_written
    # unless the model is compiled with freeze=True, which makes them once (runtime/frozen_layouts.py)
    weight_relayout: int = 0
    # the function a profiler sees it launch as: another kernel's name where the two are the same
    # code (repeated layers), loaded and compiled once; its own name otherwise
    runs_as: str = ""


@dataclass
class FallbackReport:
    op: str
    where: str
    stage: str
    why: str


@dataclass
class Report:
    target: str
    kernels: list[KernelReport]
    fallbacks: list[FallbackReport]
    timings: dict[str, float]
    captured_ops: int
    compiled_ops: int
    bytes_moved: int
    bytes_minimum: int
    allocated_ops: int = 0  # ops with zero-element outputs: allocated, no kernel, no ATen call
    checks: list[str] = field(default_factory=list)  # run-time checks after the kernels (capture/checks.py)
    boundary: list[str] = field(default_factory=list)  # outputs finished at the boundary: complex views, trims
    symbolic: list[str] = field(default_factory=list)  # symbolic sizes of this compile: "s0: input 0 dim 1, 2..∞"
    recompiles: list[str] = field(default_factory=list)  # why each compile after the first happened
    graph_breaks: list[str] = field(default_factory=list)  # training: where Dynamo split the model, and why
    # a call export could not capture whole, which Dynamo traced instead: why (api.py `_in_pieces`)
    capture_note: str = ""
    eager_graphs: list[str] = field(default_factory=list)  # training: graphs PyTorch runs, compiling them failed
    backward: Optional["Report"] = None  # training: the backward graph's report (this one is the forward's)
    saved_bytes: Optional[int] = None  # training: bytes of activations the forward saves for the backward
    eager_saved_bytes: Optional[int] = None  # and what eager PyTorch's autograd saves for the same call
    # freeze=True: ops computed from weights alone, once (runtime/weight_folding.py); counted compiled
    folded_ops: int = 0

    @property
    def compiled_fraction(self) -> float:
        return self.compiled_ops / max(1, self.captured_ops)

    def __str__(self) -> str:
        lines = [f"uniorch explain (target {self.target}): {len(self.kernels)} kernels, "
                 f"{self.compiled_ops}/{self.captured_ops} ATen ops compiled ({100 * self.compiled_fraction:.0f}%), "
                 f"{len(self.fallbacks)} eager fallbacks"
                 + (f", {self.allocated_ops} zero-element ops allocated without a kernel" if self.allocated_ops else "")
                 + (f", {self.folded_ops} computed from weights once (freeze)" if self.folded_ops else ""),
                 f"bytes moved {_mb(self.bytes_moved)} vs minimum {_mb(self.bytes_minimum)} "
                 f"({self.bytes_moved / max(1, self.bytes_minimum):.2f}x)", "",
                 f"{'kernel':<28} {'kind':<12} {'ops':>4} {'read':>10} {'written':>10}  fused ATen ops"]
        for k in self.kernels:
            names = ", ".join(dict.fromkeys(o.removeprefix("aten.").split(".")[0] for o, _ in k.ops))
            lines.append(f"{k.name:<28} {k.kind:<12} {len(k.ops):>4} {_mb(k.bytes_read):>10} {_mb(k.bytes_written):>10}  {names}")
        notes = [k for k in self.kernels if k.note]
        if notes:
            lines += ["", "kernels the target runs another way:"] + [f"  {k.name}: {k.note}" for k in notes]
        if self.checks:
            lines += ["", "run-time checks (a failed linalg check raises eager's error; a failed require runs the "
                          "call eagerly):"] + [f"  {c}" for c in self.checks]
        if self.boundary:
            lines += ["", "finished at the boundary: " + ", ".join(self.boundary)]
        if self.symbolic:
            lines += ["", "symbolic sizes (one compile serves them all): " + "; ".join(self.symbolic)]
        if self.eager_graphs:
            lines += ["", "graphs run by PyTorch (uniorch failed to compile them):"] + [f"  {g}" for g in self.eager_graphs]
        if self.capture_note:
            lines += ["", f"traced by Dynamo: {self.capture_note}"]
        if self.graph_breaks:
            lines += ["", "graph breaks (Dynamo ran these between the compiled graphs):"] + [f"  {g}" for g in self.graph_breaks]
        if self.recompiles:
            lines += ["", "recompiles:"] + [f"  {i + 1}. {r}" for i, r in enumerate(self.recompiles)]
        if self.fallbacks:
            lines += ["", "eager fallbacks (op, where, why):"]
            lines += [f"  {f.op:<28} {f.where:<40} [{f.stage}] {(f.why.splitlines() or [''])[0]}"
                      for f in self.fallbacks]
        lines += ["", "timings: " + ", ".join(f"{k.strip()} {v * 1e3:.0f} ms" for k, v in self.timings.items())]
        if self.saved_bytes is not None:
            eager = f" (eager autograd saves {self.eager_saved_bytes / 1e6:.3f} MB)" if self.eager_saved_bytes is not None else ""
            lines.append(f"saved for backward: {self.saved_bytes / 1e6:.3f} MB of activations{eager}")
        if self.backward is not None:
            lines += ["", "backward graph (AOTAutograd, min-cut partition):", str(self.backward)]
        return "\n".join(lines)


def _mb(n: int) -> str:
    return f"{n / 1e6:.3f} MB" if n >= 1e5 else f"{n} B"


def compute_types(func_op) -> tuple[str, ...]:
    """Element types of the function's arguments and results and of every value an op computes.

    Constants are left out: `arith.constant 1e-05 : f64` truncated to f32 is folded, not float64
    arithmetic (Triton's source still spells it `tl.full([], 1e-05, tl.float64)`, so the MLIR is
    the more faithful place to look)."""
    from torch_mlir import ir

    if func_op is None:
        return ()
    seen: set[str] = set()

    def add(t):
        seen.add(str(ir.ShapedType(t).element_type if isinstance(t, ir.ShapedType) else t))

    ftype = ir.FunctionType(ir.TypeAttr(func_op.attributes["function_type"]).value)
    for t in (*ftype.inputs, *ftype.results):
        add(t)

    def visit(op):
        if op.name != "arith.constant":
            for v in op.results:
                add(v.type)
        return ir.WalkResult.ADVANCE

    func_op.walk(visit)
    return tuple(sorted(seen))


def merged_report(reports: list[Report]) -> Report:
    """One report for graphs that run one after another in a call (the pieces Dynamo split a
    model into): kernels, fallbacks and bytes add up; the first report's target."""
    if len(reports) == 1:
        return reports[0]
    out = Report(target=reports[0].target, kernels=[], fallbacks=[], timings={}, captured_ops=0, compiled_ops=0,
                 bytes_moved=0, bytes_minimum=0)
    for i, r in enumerate(reports):
        out.kernels += r.kernels
        out.fallbacks += r.fallbacks
        for k, v in r.timings.items():
            out.timings[k] = out.timings.get(k, 0.0) + v
        out.captured_ops += r.captured_ops
        out.compiled_ops += r.compiled_ops
        out.bytes_moved += r.bytes_moved
        out.bytes_minimum += r.bytes_minimum
        out.allocated_ops += r.allocated_ops
        out.checks += r.checks
        out.boundary += r.boundary
        out.symbolic += r.symbolic
    return out
