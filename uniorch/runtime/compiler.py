"""Compiles one functional FX (sub)graph into a launch plan of Triton kernels.

    FX graph → torch dialect (node-tagged locations) → linalg → uniorch-preprocess → uniorch-fuse
    → uniorch-schedule{target} → uniorch-concat-in-place → uniorch-plan-memory → per kernel: Triton source → loaded function

Any failure raises `RegionError` naming the FX nodes it concerns (from the `"@node"` location tags),
so the caller can run exactly those eagerly and compile the rest.
"""
from __future__ import annotations

import contextlib
import contextvars
import operator
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch_mlir import ir

from uniorch.codegen import CodegenError, generate
from uniorch.codegen.patterns import schedule_text
from uniorch.errors import UniorchError
from uniorch.ir import dims, lower, make_context
from uniorch.ir.importer import import_graph, node_names
from uniorch.targets import Target

from .kernel_bytes import kernel_bytes, relayout_bytes
from .plan import Kernel, LaunchPlan, PlanError, build_plan, inplace_of

KERNEL_STAGES = ("fused", "scheduled")
PIPELINES = {
    "fused": "uniorch-preprocess, uniorch-fuse, uniorch-fuse-row-stats, uniorch-fuse-attention, uniorch-fuse-chain, uniorch-fuse-siblings, uniorch-fuse-depthwise, uniorch-fuse-operand-sums",
    "scheduled": "uniorch-preprocess, uniorch-fuse, uniorch-fuse-row-stats, uniorch-fuse-attention, uniorch-fuse-chain, uniorch-fuse-siblings, uniorch-fuse-depthwise, uniorch-fuse-operand-sums, uniorch-schedule{{target={target}}}, uniorch-concat-in-place, uniorch-plan-memory",
}


class RegionError(UniorchError):
    def __init__(self, stage: str, reason: str, nodes: list[str]):
        self.stage, self.reason, self.nodes = stage, reason, nodes
        super().__init__(f"{stage}: {reason}")


@dataclass
class KernelInfo:
    name: str
    kind: str
    nodes: list[str]  # FX nodes fused into it
    schedule: dict
    source: str
    bytes_read: int
    bytes_written: int
    weight_relayout: int = 0  # of those, bytes of a parameter's layout copy, each way (freeze=True skips it)


WEIGHT_META = "uniorch_weight"  # a placeholder the capture found to be a parameter or buffer


@dataclass
class CompiledGraph:
    plan: LaunchPlan
    module: ir.Module
    kernels: list[KernelInfo]
    timings: dict[str, float] = field(default_factory=dict)
    # kernel name -> the backend's CompiledKernel (every stage), when compiled ahead of time
    compiled: dict = field(default_factory=dict)
    # per output, the dtype PyTorch gives it; MLIR's signless integers cannot say uint8 from int8
    out_dtypes: list = field(default_factory=list)
    graphs: Any = None  # the plan replayed as a CUDA graph (runtime/cuda_graphs.py), when asked for
    input_specs: Any = None  # [(shape, dtype)] of the region's inputs, where every one is a tensor
    # kernel name -> the backend's CompiledKernel specialized for its recorded arguments (AOT,
    # backends/specialization.py), beside `compiled`'s form for any arguments
    specialized: dict = field(default_factory=dict)

    def __call__(self, *inputs):
        outs = (self.graphs or self.plan)(list(inputs))
        if self.out_dtypes:
            outs = [o.view(d) if isinstance(o, torch.Tensor) and d is not None and o.dtype != d
                    and o.element_size() == d.itemsize else o for o, d in zip(outs, self.out_dtypes)]
        return tuple(outs)


def _nodes_in(op) -> list[str]:
    names: list[str] = []

    def visit(o):
        names.extend(node_names(o.location))
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return list(dict.fromkeys(names))


def compile_graph(gm: torch.fx.GraphModule, target: Target, run: bool = True, kernel_prefix: str = "") -> CompiledGraph:
    """`run=False` stops after codegen (kernels not loaded, no trial launch): what ahead-of-time
    compilation for a device this machine lacks needs. `kernel_prefix` starts every kernel's name
    (passes/base.py PassContext)."""
    timings: dict[str, float] = {}
    all_nodes = [n.name for n in gm.graph.nodes if n.op == "call_function"]
    empty = _empty_tensor_nodes(gm)
    if empty:
        # torch-mlir's lowering of some views of them divides by zero (a crash of the whole
        # process, not an error), so these ops stay in PyTorch. Ops whose result shapes alone
        # decide were folded into fills before partitioning (partition.fold_empty_inputs); what
        # is left reads an empty tensor together with a non-empty one, or has no uniform result
        raise RegionError("import", "zero-element tensors: nothing to compute, left to PyTorch", empty)
    t = time.perf_counter()
    ctx = make_context()
    _stable_sorts_for_import(gm)
    try:
        module = import_graph(gm.graph, ctx, tag_nodes=True)
        lower(module, "linalg")
    except UniorchError as err:
        raise RegionError("import", _unlowered(str(err), err), _error_nodes(err) or all_nodes) from None
    except Exception as err:  # a bug of ours: this region runs eagerly, and explain shows the bug
        raise RegionError("import", f"internal error: {type(err).__name__}: {err}", all_nodes) from None
    timings["import+lower"] = time.perf_counter() - t
    from uniorch.passes.returned_views import record_result_layouts

    dims.record_symbols(module, gm.graph)
    record_result_layouts(module, gm.graph)
    specs = []
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            val = n.meta.get("val")
            shape = _example_shape(val) if isinstance(val, torch.Tensor) else None
            if shape is None:
                specs = None  # data-dependent or non-tensor inputs: the first real call checks the kernels
                break
            specs.append((shape, val.dtype))
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    weights = [i for i, n in enumerate(places) if n.meta.get(WEIGHT_META)]
    if weights:  # explain's bytes under freeze=True leave their layout copies out
        with module.context:
            module.operation.attributes["uniorch.weight_args"] = ir.DenseI64ArrayAttr.get(weights)
    compiled = compile_module(module, target, run, specs, all_nodes, timings, kernel_prefix)
    compiled.input_specs = specs
    out = next(n for n in gm.graph.nodes if n.op == "output")
    returned = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
    results = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in returned]
    compiled.out_dtypes = [getattr(v, "dtype", None) for v in results]
    compiled.plan.device = _recorded_device(results, target)
    return compiled


def _recorded_device(results: list, target: Target):
    """Where a region's results live when none of its inputs says (runtime/plan.py `device_of`): the
    device the capture recorded for them, else the target's."""
    for v in results:
        dev = getattr(v, "device", None)
        if isinstance(v, torch.Tensor) and dev is not None:
            return dev
    return torch.device(target.backend.device_type)


def _example_shape(val) -> tuple | None:
    """A placeholder's shape for the trial launch: symbolic sizes at the capture's values."""
    out = []
    for d in val.shape:
        if isinstance(d, int):
            out.append(d)
        elif isinstance(d, torch.SymInt) and d.node.has_hint():
            out.append(int(d.node.hint))
        else:
            return None
    return tuple(out)


def _stable_sorts_for_import(gm: torch.fx.GraphModule) -> None:
    """`aten.sort.stable` as `aten.sort.default` for torch-mlir, which has no op for the former.

    Exact because uniorch's sort kernel is stable either way (ties keep their input order, as
    PyTorch's stable sort promises). Only this region's copy of the graph changes: if the kernel
    cannot be built, the node runs eagerly as the original `sort.stable`."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.aten.sort.stable:
            dim = n.kwargs.get("dim", -1)
            descending = n.kwargs.get("descending", False)
            n.target = torch.ops.aten.sort.default
            n.args, n.kwargs = (n.args[0], dim, descending), {}
    gm.recompile()


def _empty_tensor_nodes(gm: torch.fx.GraphModule) -> list[str]:
    def empty(node) -> bool:
        vals = node.meta.get("val")
        vals = vals if isinstance(vals, (list, tuple)) else [vals]
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        # symbolic sizes (data-dependent outputs) are not known to be empty
        return any(isinstance(v, torch.Tensor) and statically_known_true(v.numel() == 0) for v in vals)

    def empty_output(node) -> bool:
        if node.target is operator.getitem:  # its source's used results decide
            return False
        vals = node.meta.get("val")
        if not isinstance(vals, (list, tuple)):
            return empty(node)
        # an unused empty result of a multi-result op (embedding_bag's offset2bag) is never lowered
        used = {u.args[1] for u in node.users if u.target is operator.getitem}
        return any(isinstance(v, torch.Tensor) and i in used and statically_known_true(v.numel() == 0)
                   for i, v in enumerate(vals))

    from torch.fx.experimental.symbolic_shapes import statically_known_true

    # a size read off an empty tensor (a sliding cache's counter, runtime/library_pytrees.py)
    # reads no element: torch-mlir takes it as a tensor.dim
    metadata = (torch.ops.aten.sym_size.int, operator.getitem)
    return [n.name for n in gm.graph.nodes
            if n.op == "call_function" and (empty_output(n) or any(empty(a) for a in n.all_input_nodes
                                                                   if n.target not in metadata))]


def compile_module(module: ir.Module, target: Target, run: bool = True, input_specs=None,
                   all_nodes: list[str] | None = None, timings: dict | None = None,
                   kernel_prefix: str = "") -> CompiledGraph:
    """Compiles a linalg-on-tensors module (from a capture, or from ONNX) into a launch plan.

    `input_specs` [(shape, dtype)] lets a trial launch find kernels that fail at their first
    launch now; `all_nodes` are the FX nodes a failure without a location is blamed on."""
    from uniorch.passes.ir_utils import main_func

    with dims.ranges_of(main_func(module)):
        return _compile_module(module, target, run, input_specs, all_nodes, timings, kernel_prefix)


def _compile_module(module, target, run, input_specs, all_nodes, timings, kernel_prefix) -> CompiledGraph:
    from uniorch.passes.ir_utils import main_func

    all_nodes = all_nodes or []
    timings = timings if timings is not None else {}
    t = time.perf_counter()
    try:
        to_kernel_stage(module, "scheduled", target, kernel_prefix)
    except UniorchError as err:
        raise RegionError("passes", str(err), _error_nodes(err) or all_nodes) from None
    except Exception as err:  # a bug of ours: this region runs eagerly, and explain shows the bug
        raise RegionError("passes", f"internal error: {type(err).__name__}: {err}", all_nodes) from None
    timings["passes"] = time.perf_counter() - t

    t = time.perf_counter()
    backend = target.backend
    main = main_func(module)
    kernels: dict[str, Kernel] = {}
    infos: list[KernelInfo] = []
    calls: dict[str, list] = {}
    for c in _main_ops(main):
        if c.name == "func.call":
            calls.setdefault(ir.FlatSymbolRefAttr(c.attributes["callee"]).value, []).append(c)
    sources = []
    for op in module.body.operations:
        op = op.operation
        if op.name != "func.func" or "uniorch.kernel" not in op.attributes:
            continue
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if "uniorch.unsupported" in op.attributes:
            raise RegionError("codegen", ir.StringAttr(op.attributes["uniorch.unsupported"]).value, _nodes_in(op) or all_nodes)
        with _codegen_errors(op, name, all_nodes):
            sources.append((op, name, generate(op, str(target))))
    if run:
        try:
            backend.prepare([ks for _, _, ks in sources])
        except Exception as err:  # noqa: BLE001 - a plugin's batch step failing: its region runs eagerly, said why
            raise RegionError("backend", f"{type(backend).__name__}.prepare() raised {type(err).__name__}: {err}",
                              all_nodes) from None
    for op, name, ks in sources:
        with _codegen_errors(op, name, all_nodes):
            fn = _load(op, ks, target, backend) if run else None
        kernels[name] = Kernel(name, ks, fn, inplace_of(op), op)
        ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
        sched = schedule_text(op)
        read, written = kernel_bytes(op, calls.get(name, ()))
        infos.append(KernelInfo(name, ir.StringAttr(op.attributes["uniorch.kind"]).value, _nodes_in(op), sched,
                                ks.source, read, written))
    try:
        plan = build_plan(module, main, kernels, _launch)
    except PlanError as err:
        bad = [op for op in _main_ops(main) if str(op.location) == err.location]
        nodes = _nodes_in(bad[0]) if bad else []
        raise RegionError("plan", str(err), nodes or all_nodes) from None
    weights = _weight_operands(module, main, calls)
    for info in infos:  # factors copied to another layout before the kernel, unless written in it
        k = kernels[info.name]
        done = plan.laid_out.get(info.name, set())
        copied = relayout_bytes(k.func_op, [(i, o) for i, o in k.source.relayout if i not in done])
        info.bytes_read, info.bytes_written = info.bytes_read + copied, info.bytes_written + copied
        # of which a parameter's or buffer's copy, made once under freeze=True (runtime/frozen_layouts.py)
        info.weight_relayout = relayout_bytes(k.func_op, [(i, o) for i, o in k.source.relayout
                                                          if i not in done and i in weights.get(info.name, ())])
    timings["codegen"] = time.perf_counter() - t
    if run and (not target.interpret or TRIAL_ON_INTERPRETER.get()):
        t = time.perf_counter()
        _trial_launch(plan, input_specs, {i.name: i for i in infos}, backend.device_type,
                      lambda kernel, need=None, limit=None: _refit(kernel, str(target), backend.load, need, limit))
        timings["first launch"] = time.perf_counter() - t
    return CompiledGraph(plan, module, infos, timings)


@contextlib.contextmanager
def _codegen_errors(op, name: str, all_nodes: list):
    """A kernel's codegen or compile failing: its region runs eagerly, with the reason."""
    try:
        yield
    except CodegenError as err:
        raise RegionError("codegen", f"{name}: {err}", _nodes_in(op) or all_nodes) from None
    except Exception as err:  # Triton rejected our source: a codegen bug, never a wrong answer
        raise RegionError("codegen", f"{name}: {type(err).__name__}: {err}", _nodes_in(op) or all_nodes) from None


def _weight_operands(module, main, calls: dict) -> dict[str, set[int]]:
    """Kernel name -> its inputs that are the graph's parameters or buffers (`uniorch.weight_args`:
    main's arguments the capture marked so, compile_graph), in every call of it."""
    if "uniorch.weight_args" not in module.operation.attributes:
        return {}
    args = list(main.regions[0].blocks[0].arguments)
    weights = {args[i] for i in ir.DenseI64ArrayAttr(module.operation.attributes["uniorch.weight_args"])
               if i < len(args)}
    out: dict[str, set[int]] = {}
    for name, ops in calls.items():
        # the plan's inputs: a symbolic kernel's index operands are not among them (runtime/plan.py)
        per_call = [{i for i, v in enumerate(w for w in c.operands if isinstance(w.type, ir.ShapedType))
                     if v in weights} for c in ops]
        out[name] = set.intersection(*per_call) if per_call else set()
    return out


def fp32_precisions(target: Target) -> dict:
    """Triton's input_precision for float32 dots by kernel kind, from PyTorch's settings as eager
    and Inductor read them when they run or compile (read once, at compile time):

    - "highest" float32 matmul precision (the default) keeps matmuls exact; "high" or "medium" (or
      `torch.backends.cuda.matmul.allow_tf32 = True`) lets every float32 dot use TF32 tensor cores;
    - a float32 attention is 3xTF32 by default (codegen/patterns.py `attention_precision`: what
      PyTorch's memory-efficient SDPA kernel computes), and exact when that kernel is disabled
      (`torch.nn.attention.sdpa_kernel(SDPBackend.MATH)`), as eager then runs the math;
    - a convolution (forward or backward) follows `torch.backends.cudnn.allow_tf32`, as eager's and
      Inductor's cuDNN calls do: TF32 by default, exact when it is False.

    Only NVIDIA GPUs from sm_80 have TF32; elsewhere every float32 dot is exact."""
    if not target.has_tf32:
        return {}
    out = {"convolution": "tf32" if _conv_tf32() else "ieee"}
    if _matmul_tf32():
        out["*"] = "tf32"
    elif not torch.backends.cuda.mem_efficient_sdp_enabled():
        out["attention"] = "ieee"
    return out


def _matmul_tf32() -> bool:
    try:
        return torch.get_float32_matmul_precision() != "highest"
    except RuntimeError:  # PyTorch's per-backend API (2.9+) used beside the legacy one: it refuses
        return torch.backends.cuda.matmul.fp32_precision == "tf32"


def _conv_tf32() -> bool:
    try:
        return bool(torch.backends.cudnn.allow_tf32)
    except RuntimeError:  # as above: cuDNN's convolutions and RNNs set apart
        return torch.backends.cudnn.conv.fp32_precision == "tf32"


def _load(op, ks, target: Target, backend):
    """The kernel's launcher: the backend's, or with UNIORCH_AUTOTUNE the fastest of a few tile
    configurations, measured at the first call (runtime/autotune.py)."""
    from . import autotune

    if not (autotune.enabled(target) and autotune.tunable(op, inplace_of(op))):
        return backend.load(ks)
    cands = autotune.candidates(op, str(target), generate)
    if len(cands) < 2:
        return backend.load(ks)
    device = _device_name(backend.device_type)
    return autotune.AutotunedLauncher(ks.name, cands, backend.load, device)


def _device_name(device_type: str) -> str:
    if device_type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return device_type


def _refit(kernel: Kernel, target: str, load, need: Optional[int] = None,
           limit: Optional[int] = None) -> Optional[dict]:
    from .resources import refit

    return refit(kernel, target, load, need=need, limit=limit)


# Triton's interpreter compiles nothing and has no shared memory to run out of: a kernel that
# fails there (a Python error of the kernel) fails the first call too, and its region then runs in
# PyTorch (partition.py `_Region`, reported as a launch fallback). A trial launch doubled every
# interpreted compile's run time (8 % of seven of the slowest test files), so on the interpreter
# only `explain` asks for one, to report the failing kernel's own ops with its name before any call.
TRIAL_ON_INTERPRETER: contextvars.ContextVar[bool] = contextvars.ContextVar("trial_on_interpreter", default=False)


@contextlib.contextmanager
def trials_on_interpreter():
    token = TRIAL_ON_INTERPRETER.set(True)
    try:
        yield
    finally:
        TRIAL_ON_INTERPRETER.reset(token)


def _trial_launch(plan: LaunchPlan, specs, infos: dict, device: str, refit: Optional[Callable] = None) -> None:
    """Runs the plan once on made-up inputs of the right shapes, so a kernel that Triton rejects
    at its first launch is found now, with its name, and only its ATen ops fall back. One rejected
    for its shared memory is first generated again smaller (`refit`, runtime/resources.py)."""
    if specs is None:
        return
    # compiling must not move the caller's random stream (made-up inputs, random ops' seeds)
    with torch.random.fork_rng(devices=None if device == "cuda" else []):
        _trial_launch_forked(plan, specs, infos, device, refit)


def _trial_launch_forked(plan: LaunchPlan, specs, infos: dict, device: str, refit: Optional[Callable]) -> None:
    from .resources import out_of_shared_memory, shared_need

    inputs = []
    for shape, dtype in specs:
        # zeros for integers: always valid as indices; floats random so no kernel sees only zeros
        make = torch.randn if dtype.is_floating_point else torch.zeros
        inputs.append(make(tuple(shape), dtype=dtype, device=device))
    if device != "cpu":
        _compile_ahead(plan, inputs)
    while True:  # refits end: each takes a kernel one rung down a finite ladder, then None
        failed: list = []

        def launch(kernel: Kernel, ins, outs, sizes=None):
            try:
                _launch(kernel, ins, outs, sizes)
            except Exception as err:  # noqa: BLE001 - Triton raises many kinds
                failed.append((kernel, err))
                info = infos.get(kernel.name)
                raise RegionError("launch", f"{kernel.name}: {type(err).__name__}: {err}",
                                  info.nodes if info else []) from None

        try:
            with _launching(plan, launch), torch.no_grad():
                plan(inputs)
            return
        except RegionError:
            if not failed or refit is None or not out_of_shared_memory(failed[0][1]):
                raise
            kernel = failed[0][0]
            if refit(kernel, *shared_need(failed[0][1])) is None:
                raise
            info = infos.get(kernel.name)
            if info is not None:
                info.source, info.schedule = kernel.source.source, schedule_text(kernel.func_op)


@contextlib.contextmanager
def _launching(plan: LaunchPlan, launch: Callable):
    """The plan with `launch` in place of its own for the duration."""
    saved = plan.launch
    plan.launch = launch
    try:
        yield plan
    finally:
        plan.launch = saved


def _compile_ahead(plan: LaunchPlan, inputs: list, workers: Optional[int] = None) -> None:
    """Every kernel of the plan compiled at once, in a pool of threads, before the trial launch
    compiles them one after the other: the plan runs with each launch replaced by the launcher's
    `warmup` under Triton's AsyncCompileMode, which queues the compile (its front end, MLIR passes
    and ptxas) and returns. Cold compile was uniorch's cost in H200 run 3: 7 to 10 s per model
    against torch.compile's 2 s, mostly Triton compiling nine to fifteen kernels in turn. Errors
    are left for the trial launch to raise, with the kernel's name."""
    warm = [k for k in plan.kernels.values() if hasattr(k.fn, "warmup")]
    if len(warm) < 2:
        return
    try:
        from triton.runtime._async_compile import AsyncCompileMode
    except ImportError:  # a Triton without it compiles at the trial launch, in turn
        return
    import os
    from concurrent.futures import ThreadPoolExecutor

    def launch(kernel: Kernel, ins, outs, sizes=None):
        if hasattr(kernel.fn, "warmup"):
            kernel.fn.warmup(ins, outs, sizes)

    launch.compiles_only = True  # the plan's relayout copies compile too (runtime/relayout.py)
    try:
        with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool, \
                AsyncCompileMode(_WithLaunchers(pool), ignore_errors=True), _launching(plan, launch), torch.no_grad():
            plan(inputs)
    except Exception:  # noqa: BLE001 - the trial launch that follows reports what fails
        pass


class _WithLaunchers:
    """The compile pool, where each worker also builds its kernel's launcher once the kernel is
    compiled. Triton 3.6's CUDA launcher is C source made for the kernel's signature and compiled
    by the host's C compiler (0.2 to 0.3 s each here) when the kernel first runs: in turn, at the
    trial launch, for every signature a model's kernels have. Built here it lands in Triton's
    cache, which the first launch then loads. Nothing touches the GPU in the workers."""

    def __init__(self, pool):
        self.pool = pool

    def submit(self, fn, *args, **kwargs):
        return self.pool.submit(_compile_then_launcher, fn, args, kwargs)


def _compile_then_launcher(fn, args, kwargs):
    kernel = fn(*args, **kwargs)
    try:
        from triton.runtime.driver import driver

        driver.active.launcher_cls(kernel.src, kernel.metadata)
    except Exception:  # noqa: BLE001 - only a head start: the first launch builds it again and says what fails
        pass
    return kernel


def to_kernel_stage(module: ir.Module, stage: str, target: Target, kernel_prefix: str = "",
                    instrumentation=None) -> ir.Module:
    """linalg → `fused` (groups marked) or `scheduled` (kernels outlined, buffers planned), in place.
    `instrumentation` (passes.Instrumentation): uniorch-opt's --print-ir-before/after, --timing."""
    from uniorch.passes import PassContext, parse_pipeline, run_pipeline

    text = PIPELINES[stage].format(target=target)
    pctx = PassContext(target=str(target), kernel_prefix=kernel_prefix, fp32_dots=fp32_precisions(target))
    run_pipeline(module, parse_pipeline(text, module.context), pctx, instrumentation)
    return module


def kernel_functions(module: ir.Module) -> list:
    return [op.operation for op in module.body.operations
            if op.operation.name == "func.func" and "uniorch.kernel" in op.operation.attributes]


def kernel_listing(module: ir.Module, stage: str, target: Target) -> str:
    """Every kernel of a scheduled module as Triton source (`triton`) or Triton-IR (`ttir`)."""
    parts = []
    for op in kernel_functions(module):
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if "uniorch.unsupported" in op.attributes:
            parts.append(f"# ===== {name}: no kernel, runs eagerly: "
                         f"{ir.StringAttr(op.attributes['uniorch.unsupported']).value}")
            continue
        ks = generate(op, str(target))
        if stage == "triton":
            parts.append(f"# ===== {name} (grid {ks.grid}, num_warps {ks.num_warps}) =====\n{ks.source}")
        else:
            parts.append(f"// ===== {name} =====\n{ttir(ks, target)}")
    return "\n".join(parts)


def ttir(ks, target: Target) -> str:
    """Triton-IR of a generated kernel, from Triton's own front end (vendor-neutral; built for the
    target's GPU kind, or for NVIDIA sm_90 when the target has no Triton backend of its own)."""
    from uniorch.backends.driver import compile_kernel

    return compile_kernel(ks, target.backend, stop_after="ttir").asm["ttir"]


def _main_ops(main):
    return [o.operation for o in main.regions[0].blocks[0].operations]


def _error_nodes(err: UniorchError) -> list[str]:
    names: list[str] = []
    for d in getattr(err, "diagnostics", []) or []:
        names.extend(node_names(getattr(d, "raw_location", "") or ""))
    return names


def _unlowered(said: str, err) -> str:
    """torch-mlir's "lowering to torch backend contract failed" with the op it could not lower
    (`grid_sampler_2d_backward has no lowering to linalg`), which the diagnostics name."""
    import re

    for d in getattr(err, "diagnostics", None) or []:
        notes = [str(getattr(n, "message", n)) for n in getattr(d, "notes", [])]
        text = " ".join([str(getattr(d, "message", d))] + notes)
        m = (re.search(r'<\{name = "torch\.(aten\.[\w.]+)"', text)
             or re.search(r"failed to legalize operation 'torch\.(aten\.[\w.]+)'", text))
        if m:
            return f"{said}: {m.group(1)} has no lowering to linalg in torch-mlir"
    return said


def _launch(kernel: Kernel, inputs, outputs, sizes=None) -> None:
    if sizes is None:
        kernel.fn(inputs, outputs)  # the backend's Launcher
        return
    try:
        kernel.fn(inputs, outputs, sizes)
    except TypeError as err:
        import inspect

        try:
            inspect.signature(kernel.fn).bind(inputs, outputs, sizes)
        except (TypeError, ValueError):
            from uniorch.backends.sdk import BackendError

            # a plugin written to the SDK's first contract: say what it lacks, not Python's arity error
            raise BackendError(f"the backend's launcher ({type(kernel.fn).__name__}) takes no `sizes` argument: a "
                               f"kernel with symbolic sizes is launched as launcher(inputs, outputs, sizes), its grid "
                               f"from sdk.launch_grid (docs/backend_guide.md, 'Running kernels')") from err
        raise


__all__ = ["compile_graph", "CompiledGraph", "KernelInfo", "RegionError"]
