"""The public entry points: `compile`, `explain`, and the `torch.compile` backend (docs/design.md)."""
from __future__ import annotations

import functools
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.utils._pytree as pytree

from .capture import CapturedGraph, capture
from .runtime.boundary import CheckFailed

from .runtime.partition import Program, compile_program
from .targets import Target, parse_target, require_runnable

DEFAULT_CACHE_LIMIT = 8


def _spec(args: tuple, kwargs: dict):
    """The guard key of one call: structure, and per leaf its tensor metadata or constant value."""
    leaves, tree = pytree.tree_flatten((args, kwargs))
    key = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            key.append(("T", tuple(leaf.shape), leaf.dtype, leaf.device.type, leaf.requires_grad))
        elif isinstance(leaf, (int, float, bool, str, type(None))):
            key.append(("C", type(leaf).__name__, leaf))
        else:  # dtypes, devices, ...: equal values share a compile; other objects by identity
            try:
                key.append(("O", type(leaf).__name__, hash(leaf), leaf))
            except TypeError:
                key.append(("O", type(leaf).__name__, id(leaf)))
    return (str(tree), tuple(key))


@dataclass
class _Entry:
    captured: Optional[CapturedGraph]  # None: capture failed and the whole call runs eagerly
    program: Optional[Program]
    timings: dict[str, float]
    capture_error: str = ""
    symbols: list[str] = field(default_factory=list)  # symbolic sizes: "s0: input 0 dim 1, 2..∞"


def _eager_ops(entry: _Entry) -> int:
    """ATen ops a compile leaves to PyTorch (size reads aside: a symbolic capture has more of them)."""
    if entry.captured is None or entry.program is None:
        return 1 << 30
    names = set(entry.program.compiled_nodes) - {n for f in entry.program.launch_failures for n in f.nodes}
    return sum(1 for n in entry.captured.graph_module.graph.nodes
               if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and n.name not in names
               and n.target is not torch.ops.aten.sym_size.int and not _allocated(entry, n.name))


def _allocated(entry: _Entry, name: str) -> bool:
    return name in getattr(entry.program, "allocated_nodes", ())


class CompiledModule:
    """What `uniorch.compile` returns: called like the model, compiled once per input spec."""

    def __init__(self, model_or_fn: Any, target: Target, fallback: str, cache_size_limit: int,
                 dynamic: Optional[bool] = None):
        self._model = model_or_fn
        self._target = target
        self._fallback = fallback
        self._limit = cache_size_limit
        self._dynamic = dynamic
        self._cache: dict = {}
        self._symbolic: list = []  # (SymbolicGuard, _Entry): compiles serving many sizes
        self._varying: dict[int, set[int]] = {}  # automatic dynamic: dims seen with two sizes
        self._rejected: dict = {}  # dims tried symbolic and not kept -> why
        self.recompiles: list[str] = []  # why each compile after the first happened, and what it became
        self._lock = threading.Lock()
        self._warned = False
        self._training = None
        functools.update_wrapper(self, model_or_fn if callable(model_or_fn) and not isinstance(model_or_fn, torch.nn.Module)
                                 else type(model_or_fn).forward, updated=())

    @property
    def target(self) -> Target:
        return self._target

    def _cached(self, key) -> Optional[_Entry]:
        entry = self._cache.get(key)
        if entry is not None:
            return entry
        for guard, sym in self._symbolic:
            if guard.check(key) is None:
                return sym
        return None

    def entry(self, args: tuple, kwargs: dict) -> Optional[_Entry]:
        key = _spec(args, kwargs)
        entry = self._cached(key)
        if entry is not None:
            return entry
        with self._lock:  # one compile per spec even when threads call at once
            entry = self._cached(key)
            if entry is not None:
                return entry
            if self.cache_size >= self._limit:
                if not self._warned:
                    warnings.warn(f"uniorch: {len(self._cache)} input specs compiled for this model "
                                  f"(cache_size_limit={self._limit}); further new specs run eagerly. "
                                  f"Raise cache_size_limit or keep input shapes fixed.", stacklevel=3)
                    self._warned = True
                return None
            _check_devices(args, kwargs, self._target)
            why, baseline = self._why_new(key)
            entry = self._compile_symbolic(args, kwargs, key, why, baseline)
            if entry is not None:
                return entry
            entry = _compile_entry(self._model, args, kwargs, self._target, self._fallback)
            self._cache[key] = entry
            if why:
                self.recompiles.append(f"{why}; compiled for these sizes only" + self._rejected_note())
            return entry

    def _why_new(self, key) -> tuple[str, Optional[_Entry]]:
        """Why `key` is not served by a compile so far ("" for the first), and the static compile
        of the same argument structure whose sizes differ, if any (automatic dynamic's baseline)."""
        from .runtime.guards import varying_dims

        if not self._cache and not self._symbolic:
            return "", None
        for old_key, old in self._cache.items():
            diff = varying_dims(old_key, key)
            if diff:
                for i, dims in diff.items():
                    self._varying.setdefault(i, set()).update(d for d, _, _ in dims)
                what = ", ".join(f"input {i} dim {d}: {a} -> {b}" for i, dims in diff.items() for d, a, b in dims)
                return f"sizes changed ({what})", old
        if self._symbolic:
            return f"not served by the symbolic compile: {self._symbolic[-1][0].check(key)}", None
        return "a new input spec (structure, dtype, device or constant argument)", None

    def _compile_symbolic(self, args, kwargs, key, why: str, baseline: Optional[_Entry]) -> Optional[_Entry]:
        """A compile whose sizes stay symbolic in the dims the policy picks (runtime/guards.py), or
        None when there are none, or the capture specialized them all, or (automatic dynamic) it
        compiles fewer ops than the static compile it would replace."""
        from .runtime.guards import SymbolicGuard, every_dim, marked_dims

        if self._dynamic is False:
            return None
        dims = marked_dims(args, kwargs)
        if self._dynamic is True:
            dims = every_dim(args, kwargs)
        elif baseline is not None:
            for i, ds in self._varying.items():
                dims.setdefault(i, set()).update(ds)
        if not dims:
            return None
        tried = frozenset((i, d) for i, ds in dims.items() for d in ds)
        if tried in self._rejected:
            return None
        try:
            entry = _compile_entry(self._model, args, kwargs, self._target, self._fallback, dynamic=dims)
            guard = SymbolicGuard.of(entry.captured, key) if entry.captured is not None else None
        except Exception as err:  # noqa: BLE001 - a bug of ours in the symbolic path: the static compile still serves
            if self._fallback == "error":
                raise
            self._rejected[tried] = f"the symbolic compile failed: {type(err).__name__}: {err}".splitlines()[0][:200]
            return None
        if guard is None or not guard.symbolic:
            self._rejected[tried] = "the capture kept every size static"
            return None
        if baseline is not None and self._dynamic is None:
            mine, theirs = _eager_ops(entry), _eager_ops(baseline)
            if mine > theirs:
                first = next((f.reason for f in entry.program.fallbacks), "")
                self._rejected[tried] = (f"with symbolic sizes {mine} ATen ops run eagerly, {theirs} with static ones"
                                         + (f" (first eager op: {first.splitlines()[0][:160]})" if first else ""))
                return None
        entry.symbols = guard.describe()
        self._symbolic.append((guard, entry))
        self.recompiles.append((f"{why}; " if why else "") + "compiled with symbolic sizes: " + "; ".join(entry.symbols))
        return entry

    def _rejected_note(self) -> str:
        return "".join(f" (symbolic sizes not kept: {w})" for w in list(self._rejected.values())[-1:])

    def __call__(self, *args, **kwargs):
        from .runtime.training import needs_autograd

        if needs_autograd(self._model, args, kwargs):
            return self.training(*args, **kwargs)
        entry = self.entry(args, kwargs)
        if entry is None or entry.captured is None:
            return self._model(*args, **kwargs)
        flat = entry.captured.flat_inputs(args, kwargs)
        outs = entry.program(*flat)
        try:
            return entry.captured.finish(args, kwargs, list(outs))
        except CheckFailed:  # a rewrite's run-time condition failed: eager gives the right answer
            return self._model(*args, **kwargs)

    @property
    def training(self):
        """The training path (runtime/training.py): forward and backward graphs from AOTAutograd,
        each compiled by uniorch; used for calls that autograd must record."""
        if self._training is None:
            from .runtime.training import TrainingCompile

            self._training = TrainingCompile(self._model, self._target, self._fallback, self._limit)
        return self._training

    @property
    def cache_size(self) -> int:
        """Compiles held: one per static input spec, one per symbolic compile."""
        return len(self._cache) + len(self._symbolic)

    def generate(self, *args, **kwargs):
        """`model.generate(...)` (transformers) with every forward call, the prefill and each decode
        step, running through this compiled module; the same arguments and result as the model's."""
        model = self._model
        if not hasattr(model, "generate"):
            raise AttributeError(f"{type(model).__name__} has no generate()")
        original, compiled, inside = model.forward, self, threading.local()

        def forward(*a, **k):
            # capture traces the model and an eager fallback runs it: both reach this forward again,
            # and must get the model's own
            if getattr(inside, "on", False):
                return original(*a, **k)
            inside.on = True
            try:
                return compiled(*a, **k)
            finally:
                inside.on = False

        model.forward = forward
        try:
            return model.generate(*args, **kwargs)
        finally:
            del model.forward

    def explain(self, *args, **kwargs) -> "Report":
        """The report for this input spec (compiling it first if needed). For a call autograd must
        record (training), the forward graph's report, with the backward graph's as `.backward`
        (compiled at the first backward: run one before asking for it)."""
        from .runtime.training import needs_autograd

        if needs_autograd(self._model, args, kwargs):
            tc = self.training
            if not tc.forward and tc.failure is None:
                tc(*args, **kwargs)
            if not tc.forward:
                rep = _report(_Entry(None, None, {}, f"training path: {tc.failure}"), self._target, args, kwargs)
                rep.backward = None
                return rep
            from .runtime.training import eager_saved_activation_bytes

            rep = tc.report(tc.forward[-1])
            rep.backward = tc.report(tc.backward[-1]) if tc.backward else None
            if tc.backward:
                rep.saved_bytes = tc.saved.get(id(tc.backward[-1]))
                rep.eager_saved_bytes = eager_saved_activation_bytes(self._model, args, kwargs)
            return rep
        entry = self.entry(args, kwargs)
        if entry is None:
            entry = _compile_entry(self._model, args, kwargs, self._target, self._fallback)
        rep = _report(entry, self._target, args, kwargs)
        rep.recompiles = list(self.recompiles)
        return rep


def _check_devices(args: tuple, kwargs: dict, target: Target) -> None:
    """Kernels of a target run on its device only; a tensor elsewhere is the caller's mistake, and
    saying so beats a crash inside a kernel launch."""
    from .errors import UniorchError

    want = target.backend.device_type
    paths, _ = pytree.tree_flatten_with_path((args, kwargs))
    for path, leaf in paths:
        if isinstance(leaf, torch.Tensor) and leaf.device.type != want:
            where = pytree.keystr(path)
            raise UniorchError(f"input {where} is on device '{leaf.device}', but target '{target}' runs kernels on "
                               f"'{want}'; move the inputs there, or compile for a target of that device")


def _compile_entry(model, args, kwargs, target: Target, fallback: str, launch: bool = True,
                   dynamic: Optional[dict] = None) -> _Entry:
    """`launch=False` stops each region after codegen: no kernel is loaded or trial-launched.
    `dynamic`: flat argument index -> dims captured with symbolic sizes."""
    from .errors import CaptureError

    timings = {}
    t = time.perf_counter()
    try:
        captured = capture(model, args, kwargs, dynamic=dynamic)
    except CaptureError as err:
        if fallback == "error":
            raise
        # the model runs as it is; if it raised during capture it raises again, as the user's error
        return _Entry(None, None, {"capture": time.perf_counter() - t}, str(err))
    timings["capture"] = time.perf_counter() - t
    t = time.perf_counter()
    region = None
    if not launch:
        from .runtime.compiler import compile_graph

        region = functools.partial(compile_graph, run=False)
    program = compile_program(captured.graph_module, target, fallback, compile_region=region)
    timings["compile"] = time.perf_counter() - t
    timings.update({f"  {k}": v for k, v in program.timings.items()})
    return _Entry(captured, program, timings)


def compile(model_or_fn: Any, target: str = "auto", *, fallback: str = "eager",
            cache_size_limit: int = DEFAULT_CACHE_LIMIT, dynamic: Optional[bool] = None) -> CompiledModule:
    """Returns a callable with the model's signature and outputs, running uniorch's kernels.

    model_or_fn: an nn.Module, a function of tensors, or an ONNX model (a .onnx path or an
    onnx.ModelProto; it is then called with the graph's inputs, positionally or by name); or a
    torch.optim optimizer or its `step` (runtime/optimizer.py: each group's update as kernels).
    target: "auto" | "interpret" | "cuda[:sm_XX]" | "rocm[:gfxNNN]" | "cann[:…]" (docs/design.md).
    fallback: "eager" runs what cannot be compiled in PyTorch (reported by `explain`);
    "error" raises instead. The first call per input spec (shapes, dtypes, devices, constant
    arguments) captures and compiles; later calls with that spec reuse it.
    dynamic: as torch.compile's. None: when a call differs from a compiled one only in sizes,
    those dims are tried symbolic (one compile for every size; kept when it leaves no more ops
    to PyTorch than the static compile); True: every dim symbolic from the first call; False: never.
    `torch._dynamo.mark_dynamic(t, d)` makes a dim symbolic from the first call. `explain` lists
    the symbolic sizes and why each recompile happened.
    """
    if fallback not in ("eager", "error"):
        raise ValueError(f"fallback must be 'eager' or 'error', not {fallback!r}")
    tgt = parse_target(target)
    require_runnable(tgt)
    from .frontends.onnx import is_onnx

    if is_onnx(model_or_fn):  # a .onnx path or an onnx.ModelProto
        from .frontends.onnx_model import OnnxModel

        return OnnxModel(model_or_fn, tgt, fallback)
    from .runtime.optimizer import compile_step, optimizer_of_step

    optimizer = optimizer_of_step(model_or_fn)
    if isinstance(model_or_fn, torch.optim.Optimizer) or optimizer is not None:
        compiled = compile_step(optimizer or model_or_fn, tgt, fallback, cache_size_limit)
        return compiled if optimizer is None else compiled.step
    if dynamic not in (None, True, False):
        raise ValueError(f"dynamic must be None, True or False, not {dynamic!r}")
    return CompiledModule(model_or_fn, tgt, fallback, cache_size_limit, dynamic)


# -- explain ---------------------------------------------------------------------------------------
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
    backward: Optional["Report"] = None  # training: the backward graph's report (this one is the forward's)
    saved_bytes: Optional[int] = None  # training: bytes of activations the forward saves for the backward
    eager_saved_bytes: Optional[int] = None  # and what eager PyTorch's autograd saves for the same call

    @property
    def compiled_fraction(self) -> float:
        return self.compiled_ops / max(1, self.captured_ops)

    def __str__(self) -> str:
        lines = [f"uniorch explain (target {self.target}): {len(self.kernels)} kernels, "
                 f"{self.compiled_ops}/{self.captured_ops} ATen ops compiled ({100 * self.compiled_fraction:.0f}%), "
                 f"{len(self.fallbacks)} eager fallbacks"
                 + (f", {self.allocated_ops} zero-element ops allocated without a kernel" if self.allocated_ops else ""),
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


def explain(model_or_fn: Any, *args, target: str = "auto", **kwargs) -> Report:
    """Compiles for `args`/`kwargs` and reports kernels, fallbacks, timings and bytes moved."""
    return compile(model_or_fn, target=target).explain(*args, **kwargs)


def explain_static(model_or_fn: Any, args: Any = (), kwargs: Optional[dict] = None, target: str = "interpret",
                   fallback: str = "eager") -> Report:
    """`explain` without loading or launching a kernel: capture, passes and codegen only, so it is
    fast on the interpreter and works for any target (`cuda:sm_90` on a machine without a GPU).
    A kernel that Triton would reject at its first launch is not found, so `explain` can report
    more fallbacks; bytes and kernels are those `explain` reports otherwise."""
    tgt = parse_target(target)
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    kwargs = dict(kwargs or {})
    return _report(_compile_entry(model_or_fn, args, kwargs, tgt, fallback, launch=False), tgt, args, kwargs)


def _compute_types(func_op) -> tuple[str, ...]:
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


def _report(entry: _Entry, tgt: Target, args, kwargs) -> Report:
    from .capture.locations import node_source_loc

    cg, program = entry.captured, entry.program
    if cg is None:
        why = FallbackReport("(whole model)", _where_model(), "capture", entry.capture_error)
        return Report(str(tgt), [], [why], dict(entry.timings), 0, 0, 0, 0)
    nodes = {n.name: n for n in cg.graph_module.graph.nodes}
    aten = [n for n in nodes.values() if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]

    def where(name: str) -> str:
        return str(node_source_loc(nodes[name])) if name in nodes else "?"

    kernels = []
    for r, region in enumerate(program.regions):
        for k in region.kernels:
            ops = [(str(nodes[n].target), where(n)) for n in k.nodes if n in nodes]
            name = k.name if len(program.regions) == 1 else f"r{r}.{k.name}"  # names repeat per region
            planned = region.plan.kernels.get(k.name)
            func = planned.func_op if planned is not None else None
            note = str(getattr(planned.fn, "note", "") or "") if planned is not None else ""
            kernels.append(KernelReport(name, k.kind, ops, k.schedule, k.bytes_read, k.bytes_written, k.source,
                                        _compute_types(func), note))
    failed = program.fallbacks + program.launch_failures
    fallbacks = [FallbackReport(op, where(n), f.stage, f.reason) for f in failed for n, op in zip(f.nodes, f.ops)]
    eager_now = {n for f in program.launch_failures for n in f.nodes}
    compiled = sum(1 for n in aten if n.name in program.compiled_nodes and n.name not in eager_now)
    flat = cg.flat_inputs(args, kwargs)
    minimum = sum(t.numel() * t.element_size() for t in flat if isinstance(t, torch.Tensor))
    outs = [n for n in cg.graph_module.graph.nodes if n.op == "output"][0].args[0]
    for o in pytree.tree_leaves(outs):
        val = o.meta.get("val") if isinstance(o, torch.fx.Node) else None
        if isinstance(val, torch.Tensor) and isinstance(val.numel(), int):  # data-dependent sizes: unknown
            minimum += val.numel() * val.element_size()
    moved = sum(k.bytes_read + k.bytes_written for k in kernels)
    allocated = sum(1 for n in aten if n.name in program.allocated_nodes)
    checks = [f"{c['api']}: info == 0" if c["op"] == "linalg_check_errors" else f"require: {c['what']}"
              for c in cg.checks]
    boundary = [_boundary(i, o) for i, o in enumerate(o for o in cg.outputs if o.kind == "user")]
    boundary = [b for b in boundary if b]
    return Report(str(tgt), kernels, fallbacks, dict(entry.timings), len(aten), compiled, moved, minimum, allocated,
                  checks, boundary, list(entry.symbols))


def _boundary(i: int, out) -> str:
    """How output i leaves the graph when it is not the kernels' tensor as is."""
    how = []
    if out.complex_dtype is not None:
        how.append(f"view_as_complex ({str(out.complex_dtype).removeprefix('torch.')})")
    if out.read == "item":
        how.append(".item()")
    elif out.read:
        how.append(f"trimmed along dim {out.read[1]} to a count computed in the kernels")
    return f"output {i}: " + " and ".join(how) if how else ""


def _where_model() -> str:
    return "every op runs eagerly"


BACKEND_OPTIONS = ("target", "fallback", "cache_size_limit")


def torch_backend(gm: torch.fx.GraphModule, example_inputs: list, *, options: dict | None = None,
                  mode: str | None = None, **kwargs):
    """torch.compile(model, backend="uniorch", options={...}): Dynamo's graph is compiled like any
    function, with `uniorch.compile`'s keywords (target, fallback, cache_size_limit) as options.

    Registered through the `torch_dynamo_backends` entry point. torch.compile passes its `options=`
    dict as one keyword (and `mode=` when given: Inductor's tuning modes, nothing to do here); a
    key uniorch does not know is an error naming it, not a silently ignored setting.
    """
    opts = {**(options or {}), **kwargs}
    unknown = sorted(k for k in opts if k not in BACKEND_OPTIONS)
    if unknown:
        raise ValueError(f"torch.compile(backend='uniorch'): unknown option(s) {', '.join(map(repr, unknown))}; "
                         f"known: {', '.join(BACKEND_OPTIONS)}")
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
        # training: Dynamo lifted the parameters as inputs; AOTAutograd splits forward and backward
        from .runtime.training import backend_for_dynamo

        cm = compile(gm, **opts)
        return backend_for_dynamo(gm, example_inputs, cm.target, cm._fallback, cm._limit)
    return compile(gm, **opts)


__all__ = ["compile", "explain", "CompiledModule", "Report", "torch_backend"]
