"""One workload at one dtype through every backend: cold compile, check against eager, time.

A backend that fails (compile error, wrong answer, out of memory) leaves its fields null, its
message under `errors`, and the next backend runs: one broken compiler never hides the others.
"""
from __future__ import annotations

import collections
import gc
import re
import traceback
from dataclasses import dataclass, field

import torch
import torch.utils._pytree as pytree

from . import training
from .backends import BACKENDS, Backend, cold_compile, short_error
from .timing import timed_ms
from .workloads import Workload

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# docs/design.md's tolerances: fp32 ≤ 1e-4 (tf32 is switched off for the run), bf16 ≤ 1e-2
TOLERANCE = {"fp32": 1e-4, "bf16": 1e-2}


@dataclass
class Options:
    device: str
    backends: list[str]
    warmup: int
    iters: int
    cache_root: str
    broken: dict[str, str] = field(default_factory=dict)   # backends that failed their warm-up
    sizes: str | None = None                               # "cpu" | "gpu": override the device's sizes


def rel_error(got, ref) -> float:
    """max |got - ref| / max |ref| over every output tensor: scale-free, and NaN where got has NaN."""
    worst = 0.0
    for g, r in zip(pytree.tree_leaves(got), pytree.tree_leaves(ref)):
        if not isinstance(r, torch.Tensor):
            continue
        if not isinstance(g, torch.Tensor) or g.shape != r.shape:
            return float("inf")
        g, r = g.detach().float(), r.detach().float()
        if torch.isnan(g).any() and not torch.isnan(r).any():
            return float("nan")
        scale = r.abs().max().item() or 1.0
        worst = max(worst, (g - r).abs().nan_to_num(0.0).max().item() / scale)
    return worst


def rel_error_l2(got, ref) -> float:
    """||got - ref|| / ||ref|| over all outputs: not judged, recorded beside the max-norm error to
    tell one ulp at the largest element (bf16) from a kernel that is wrong everywhere."""
    num = den = 0.0
    for g, r in zip(pytree.tree_leaves(got), pytree.tree_leaves(ref)):
        if isinstance(r, torch.Tensor) and isinstance(g, torch.Tensor) and g.shape == r.shape:
            num += (g.detach().double() - r.detach().double()).pow(2).sum().item()
            den += r.detach().double().pow(2).sum().item()
    return (num / den) ** 0.5 if den else num ** 0.5


def count_flops(fn, args) -> int:
    """Matmul/convolution/attention FLOPs of one eager call (elementwise work is not counted)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn(*args)
    return int(counter.get_total_flops())


def run_workload(w: Workload, dtype: str, opt: Options) -> dict:
    row = dict(model=w.name, dtype=dtype, kind=w.kind, sizes=getattr(w, opt.sizes or ("cpu" if opt.device == "cpu" else "gpu")),
               eager_ms=None, inductor_ms=None, inductor_max_autotune_ms=None, uniorch_ms=None,
               correct=None, kernels=None, uniorch_compile_s=None, inductor_compile_s=None,
               inductor_max_autotune_compile_s=None, achieved_GBps=None, achieved_TFLOPs=None, flops=None,
               bytes_moved=None, bytes_minimum=None, fallbacks=None, kernel_stats=None,
               rel_err={}, rel_err_l2={}, checks={}, errors={})
    torch.manual_seed(0)
    train = w.kind == "train"
    if dtype not in w.dtypes:
        row["errors"]["setup"] = f"{w.name} runs in {', '.join(w.dtypes)} only"
        return row
    try:
        fn, args = w.make(opt.device, DTYPES[dtype], opt.sizes)
        if train:  # the parameters after one step from the same weights
            ref = training.TrainStep("eager", fn, opt.device)(*args)
            row["flops"] = training.step_flops(fn, args)
        else:
            with torch.no_grad():
                ref = fn(*args)
                row["flops"] = count_flops(fn, args)
    except Exception as e:  # noqa: BLE001
        row["errors"]["setup"] = short_error(e)
        return row
    for name in opt.backends:
        if name in opt.broken:
            row["errors"][name] = f"unavailable here: {opt.broken[name]}"
            continue
        try:
            with torch.no_grad():   # a training step enables grad itself
                _run_backend(name, fn, args, ref, dtype, opt, row)
        except Exception as e:  # noqa: BLE001 - recorded, the next backend runs
            row["errors"][name] = short_error(e)
            # where it failed, for a run on a machine that is gone once it ends
            row.setdefault("tracebacks", {})[name] = traceback.format_exc()[-3000:]
        finally:
            _free(opt.device)
    missed = row.pop("_missed", {})
    if missed:
        _judge_fp64(w, fn, args, ref, missed, dtype, opt, row)
    if row["uniorch_ms"] and row["kernels"]:   # all-eager fallback moves no kernel bytes: no figure
        row["achieved_GBps"] = row["bytes_moved"] / (row["uniorch_ms"] * 1e-3) / 1e9
    if row["uniorch_ms"] and row["kernels"] and row["flops"]:
        row["achieved_TFLOPs"] = row["flops"] / (row["uniorch_ms"] * 1e-3) / 1e12
    row["correct"] = row["checks"].get("uniorch")
    return row


def _judge_fp64(w: Workload, fn, args, ref, missed: dict, dtype: str, opt: Options, row: dict) -> None:
    """Inductor's accuracy rule for a backend outside the tolerance of eager: correct when its
    result is no further from a float64 run of the same weights and inputs than eager's is (times
    2, plus the tolerance). Two fp32 runs whose convolutions pick different cuDNN algorithms
    differ by more than 1e-4 after a training step, and neither is wrong for it."""
    import copy

    try:
        model64 = copy.deepcopy(fn).double() if isinstance(fn, torch.nn.Module) else fn
        args64 = tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
        if w.kind == "train":
            ref64 = training.TrainStep("eager", model64, opt.device)(*args64)
            dist = training.rel_error
        else:
            with torch.no_grad():
                ref64 = model64(*args64)
            dist = rel_error
        theirs = dist(ref, ref64)
        for name, out in missed.items():
            mine = dist(out, ref64)
            row.setdefault("fp64_rule", {})[name] = dict(err_vs_fp64=mine, eager_vs_fp64=theirs)
            row["checks"][name] = bool(mine <= 2 * theirs + TOLERANCE[dtype])
    except Exception as e:  # noqa: BLE001 - no float64 form (an op without one): the eager rule stands
        row["errors"]["fp64_rule"] = short_error(e)
    finally:
        _free(opt.device)


def _run_backend(name: str, fn, args, ref, dtype: str, opt: Options, row: dict) -> None:
    backend = BACKENDS[name]
    if row["kind"] == "train":
        backend = Backend(name, lambda model, device: training.TrainStep(name, model, device), backend.uniorch)
    compiled, seconds, out = cold_compile(backend, fn, args, opt.device, opt.cache_root)
    if name != "eager":
        row[f"{name}_compile_s"] = seconds
        if name == "uniorch_autotune":
            from uniorch.runtime.autotune import choices

            row["autotune_choices"] = choices(getattr(compiled, "compiled", compiled))
        err = training.rel_error(out, ref) if row["kind"] == "train" else rel_error(out, ref)
        row["rel_err"][name] = err
        row["rel_err_l2"][name] = rel_error_l2(out, ref)
        row["checks"][name] = bool(err <= TOLERANCE[dtype])   # False for NaN too
        if not row["checks"][name] and err == err and err != float("inf"):
            row.setdefault("_missed", {})[name] = out   # judged against float64 after the loop
    if backend.uniorch:
        _uniorch_report(compiled, args, opt.device, row)
    elif opt.device == "cuda":
        _other_device_times(name, compiled, args, row)
    row[f"{name}_ms"], row[f"{name}_host_ms"] = timed_ms(lambda: compiled(*args), opt.device, opt.warmup, opt.iters)


def _uniorch_report(cm, args, device: str, row: dict) -> None:
    rep = cm.explain(*args)   # same input spec: reuses the compiled entry
    reports = [rep] + ([rep.backward] if getattr(rep, "backward", None) else [])   # a training step: both halves
    # and its compiled optimizer step
    optimizer = getattr(getattr(cm, "opt", None), "explain", None) if row["kind"] == "train" else None
    if optimizer is not None:
        reports.append(optimizer())
    kernels = [k for r in reports for k in r.kernels]
    row.update(kernels=len(kernels), bytes_moved=sum(r.bytes_moved for r in reports),
               bytes_minimum=sum(r.bytes_minimum for r in reports), fallbacks=sum(len(r.fallbacks) for r in reports))
    if getattr(rep, "backward", None):
        row.update(backward_kernels=len(rep.backward.kernels), saved_bytes=rep.saved_bytes,
                   eager_saved_bytes=rep.eager_saved_bytes)
    if optimizer is not None:
        row.update(optimizer_kernels=len(reports[-1].kernels), optimizer_bytes=reports[-1].bytes_moved)
    # where the cold compile went (capture, passes, codegen, the first launch compiling kernels),
    # both halves of a training step together
    stages: dict = {}
    for r in reports:
        for k, v in (r.timings or {}).items():
            stages[k.strip()] = round(stages.get(k.strip(), 0.0) + v, 3)
    row["uniorch_compile_stages"] = stages
    stats = [dict(name=k.name, kind=k.kind, bytes=k.bytes_read + k.bytes_written, ms=None) for k in kernels]
    if device == "cuda":
        _kernel_times(cm, args, kernels, stats, row)
    row["kernel_stats"] = stats


def device_times(call, args, calls: int = 5, ops: dict | None = None) -> dict[str, float]:
    """The profiler's CUDA kernels of `calls` calls of `call(*args)`: kernel name -> ms per call.
    With `ops`, also the PyTorch ops that ran kernels (what of a compiled call is not its own
    kernels: an eager op, a copy) with their input shapes: "op shapes" -> ms per call."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if ops is not None else [])
    with profile(activities=activities, record_shapes=ops is not None) as prof:
        for _ in range(calls):
            call(*args)
        torch.cuda.synchronize()
    totals: dict[str, float] = {}
    for ev in prof.key_averages():
        t = _device_us(ev)
        if t and getattr(ev, "device_type", None) is not None and "CUDA" in str(ev.device_type):
            totals[ev.key] = totals.get(ev.key, 0.0) + t / 1e3 / calls
    if ops is not None:
        for ev in prof.key_averages(group_by_input_shape=True):
            t = _device_us(ev)
            if t and ev.key.startswith("aten::") and "CPU" in str(getattr(ev, "device_type", "CPU")):
                key = f"{ev.key} {getattr(ev, 'input_shapes', '')}"[:160]
                ops[key] = ops.get(key, 0.0) + t / 1e3 / calls
    return totals


def _device_us(ev) -> float:
    t = getattr(ev, "device_time_total", None)
    return getattr(ev, "cuda_time_total", 0) if t is None else t


def _kernel_times(cm, args, kernels, stats: list[dict], row: dict) -> None:
    """Per-kernel device time from the profiler, matched to explain's kernels by Triton function
    name, and the device's own view of one call: `device_kernels` (every kernel it ran, ms per
    call) and `device_ms` (their sum). `uniorch_ms` minus `device_ms` is what the host adds (launch
    overhead, guards, allocation). Best effort: a profiler failure is recorded in `profile_error`."""
    try:
        ops: dict = {}
        totals = device_times(cm, args, ops=ops)
        row["device_kernels"] = [dict(name=n[:80], ms=round(v, 5)) for n, v in
                                 sorted(totals.items(), key=lambda kv: -kv[1])[:16]]
        # PyTorch ops that ran kernels during the call (eager ops, copies; a kernel of ours
        # launched from Python has no aten op): the device time that is not uniorch's kernels
        row["device_aten_ops"] = [dict(op=n, ms=round(v, 5)) for n, v in
                                  sorted(ops.items(), key=lambda kv: -kv[1])[:10]]
        row["device_ms"] = round(sum(totals.values()), 5)
        # kernels that are the same code run as the first one's function (`runs_as`, repeated
        # layers): the profiler's row for it is theirs together, shared evenly (same code, sizes)
        sharing = collections.Counter(getattr(k, "runs_as", "") or k.name for k in kernels)
        for k, s in zip(kernels, stats):
            # the kernel's own function (a reduction's source defines its combine function
            # first), matched whole: k1_contraction is not k11_contraction. Names are unique in
            # a step: regions (r1_), backward (bw_) and optimizer (opt_) kernels are prefixed
            if not re.search(rf"def\s+{re.escape(k.name)}\s*\(", k.source or ""):
                continue
            fn = getattr(k, "runs_as", "") or k.name
            hits = [v for n, v in totals.items() if n == fn]
            if hits:
                s["ms"] = sum(hits) / sharing[fn]
    except Exception as e:  # noqa: BLE001 - the per-kernel view is optional
        row["profile_error"] = f"{type(e).__name__}: {str(e)[:200]}"


def _other_device_times(name: str, compiled, args, row: dict) -> None:
    """torch.compile's and eager's kernels of one call, as `<name>_device_ms` and
    `<name>_device_kernels`: set beside uniorch's, a gap in wall time reads as host time or as
    kernel time. Best effort, as `_kernel_times`."""
    try:
        totals = device_times(compiled, args)
        row[f"{name}_device_kernels"] = [dict(name=n[:80], ms=round(v, 5)) for n, v in
                                         sorted(totals.items(), key=lambda kv: -kv[1])[:8]]
        row[f"{name}_device_ms"] = round(sum(totals.values()), 5)
    except Exception as e:  # noqa: BLE001
        row[f"{name}_profile_error"] = f"{type(e).__name__}: {str(e)[:200]}"


def _free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
