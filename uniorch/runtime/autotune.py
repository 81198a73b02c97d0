"""Contraction tile configurations chosen by measurement, cached on disk (as Inductor's max-autotune).

With `UNIORCH_AUTOTUNE=1`, each contraction kernel compiled for a GPU is generated once per
candidate schedule: the schedule pass's own choice first, then a small per-dtype set (tensor-core
tiles for 16-bit factors, FMA tiles for float32) clipped to the problem, each a full codegen (a
tile size changes masks and the swizzle, not only launch constants). The first call with real
inputs runs every candidate on them, times it, and keeps the fastest; the choice is written to
`<cache>/autotune.json` under the default candidate's source, the device's name and Triton's version,
so a later process (or model with the same kernel) launches it directly.

Only plain contraction kernels are tuned: one whose output is also an input (updated in place)
would be run several times on its own result. Candidates that codegen rejects (a row-statistics
kernel needs its row in one tile) are left out. On the CPU targets tuning is off unless
`UNIORCH_AUTOTUNE=force` (for tests: every candidate's numerics on the interpreter).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import time
from typing import Any, Callable

from torch_mlir import ir

# (block_m, block_n, block_k, num_warps, num_stages): Inductor's mm candidates in spirit, few
NARROW = [(128, 128, 64, 8, 3), (128, 64, 64, 4, 3), (64, 128, 64, 4, 3), (64, 64, 64, 4, 4), (128, 256, 64, 8, 3)]
FP32 = [(64, 64, 32, 4, 3), (128, 64, 32, 4, 3), (64, 128, 32, 4, 3), (128, 128, 32, 8, 3), (128, 128, 16, 8, 4)]
_LOCK = threading.Lock()


def enabled(target) -> bool:
    from uniorch import config

    value = os.environ.get("UNIORCH_AUTOTUNE", "").strip().lower()
    if value == "force":
        return True
    return config.flag("UNIORCH_AUTOTUNE") and not (target.interpret or target.vendor == "cpu")


def tunable(op: ir.Operation, inplace) -> bool:
    return (ir.StringAttr(op.attributes["uniorch.kind"]).value == "contraction" and not inplace
            and "uniorch.schedule" in op.attributes)


def candidates(op: ir.Operation, target: str, generate: Callable) -> list[tuple[tuple, Any]]:
    """[(config, KernelSource)]: the recorded schedule's first, then the set for its dtype."""
    attr = ir.DictAttr(op.attributes["uniorch.schedule"])
    base = {k: ir.IntegerAttr(attr[k]).value for k in ("block_m", "block_n", "block_k", "num_warps", "num_stages")}
    first = (base["block_m"], base["block_n"], base["block_k"], base["num_warps"], base["num_stages"])
    narrow = _tensor_core_dots(op)
    out, seen = [], set()
    for cfg in [first] + (NARROW if narrow else FP32):
        bm, bn, bk, warps, stages = cfg
        if cfg != first:
            # a recorded tile under the schedule's largest covers that whole (small) dim already
            top_mn, top_k = (128, 64) if narrow else (64, 32)
            bm = bm if base["block_m"] >= top_mn else min(bm, base["block_m"])
            bn = bn if base["block_n"] >= top_mn else min(bn, base["block_n"])
            bk = bk if base["block_k"] >= top_k else min(bk, base["block_k"])
        op.attributes["uniorch.schedule"] = schedule_with(attr, block_m=bm, block_n=bn, block_k=bk,
                                                  num_warps=warps, num_stages=stages)
        try:
            ks = generate(op, target)
        except Exception:  # noqa: BLE001 - a candidate codegen refuses (a row split over tiles)
            continue
        finally:
            op.attributes["uniorch.schedule"] = attr
        key = (ks.source, tuple(sorted(ks.constexprs.items())), ks.num_warps, ks.num_stages)
        if key in seen:
            continue
        seen.add(key)
        out.append(((bm, bn, bk, warps, stages), ks))
    return out


def _tensor_core_dots(op: ir.Operation) -> bool:
    """16-bit factors on both sides, as the schedule decides its tile ranges (contraction_schedule)."""
    from uniorch.codegen.contraction_plan import _analyze

    return all(t in ("f16", "bf16") for t in _analyze(op).dot_types)


def schedule_with(attr: ir.DictAttr, **values) -> ir.DictAttr:
    """The recorded schedule with `values` in place of its own."""
    i64 = ir.IntegerType.get_signless(64, attr.context)
    entries = {a.name: a.attr for a in attr}
    entries.update({k: ir.IntegerAttr.get(i64, v) for k, v in values.items()})
    return ir.DictAttr.get(entries, context=attr.context)


def _cache_path() -> str:
    from uniorch import config

    os.makedirs(config.cache_dir(), exist_ok=True)
    return os.path.join(config.cache_dir(), "autotune.json")


def _read_cache() -> dict:
    try:
        with open(_cache_path()) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_choice(key: str, config: list) -> None:
    with _LOCK:
        data = _read_cache()
        data[key] = config
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(_cache_path()), suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=0, sort_keys=True)
        os.replace(tmp, _cache_path())  # atomic: a concurrent reader sees the old file or the new


def cache_key(base_source: str, device: str) -> str:
    import triton

    text = "\n".join([base_source, device, getattr(triton, "__version__", "?")])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class AutotunedLauncher:
    """Launches the fastest candidate, measured at the first call (or read from the disk cache)."""

    def __init__(self, name: str, cands: list, load: Callable, device: str):
        self.name, self.cands, self._load, self.device = name, cands, load, device
        self.key = cache_key(cands[0][1].source, device)
        self.chosen = None
        self.choice = None  # (block_m, block_n, block_k, num_warps, num_stages) of the chosen one
        self.timings: dict = {}
        cached = _read_cache().get(self.key)
        if cached is not None:
            match = [i for i, (cfg, _) in enumerate(cands) if list(cfg) == list(cached)]
            if match:
                self.chosen = self._load(cands[match[0]][1])
                self.choice = cands[match[0]][0]

    def __call__(self, inputs: list, outputs: list, sizes=None) -> None:
        if self.chosen is None:
            self._tune(inputs, outputs, sizes)
        if sizes is None:
            self.chosen(inputs, outputs)
        else:
            self.chosen(inputs, outputs, sizes)

    def _tune(self, inputs, outputs, sizes) -> None:
        best, best_t = None, float("inf")
        for cfg, ks in self.cands:
            try:
                fn = self._load(ks)
                t = measure(fn, inputs, outputs, sizes)
            except Exception as err:  # noqa: BLE001 - a candidate Triton rejects is left out
                self.timings[str(cfg)] = f"{type(err).__name__}: {err}"
                continue
            self.timings[str(cfg)] = t
            if t < best_t:
                best, best_t = (cfg, fn), t
        if best is None:
            raise RuntimeError(f"autotune {self.name}: no candidate ran ({self.timings})")
        self.chosen, self.choice = best[1], best[0]
        _write_choice(self.key, list(best[0]))

    def report(self) -> dict:
        """What was chosen and what each candidate measured (seconds per launch, or its error)."""
        return {"default": list(self.cands[0][0]), "chosen": list(self.choice) if self.choice else None,
                "seconds": {k: v for k, v in self.timings.items()}}


def choices(compiled) -> dict:
    """kernel name -> `AutotunedLauncher.report()` for every tuned kernel of a `uniorch.compile`d
    callable's compiles (for the benchmark's record of what tuning picked)."""
    out = {}
    for entry in getattr(compiled, "_cache", {}).values():
        program = getattr(entry, "program", None)
        for region in getattr(program, "regions", None) or []:
            for name, kernel in region.plan.kernels.items():  # unique across regions (compile_program)
                if isinstance(kernel.fn, AutotunedLauncher):
                    out[name] = kernel.fn.report()
    return out


def measure(fn, inputs, outputs, sizes, reps: int = 10) -> float:
    """Seconds per launch: one warm-up (the compile), then `reps` launches between two syncs."""
    import torch

    def call():
        fn(inputs, outputs) if sizes is None else fn(inputs, outputs, sizes)

    cuda = any(getattr(t, "is_cuda", False) for t in outputs)
    call()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps if cuda else 1):
        call()
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / (reps if cuda else 1)


__all__ = ["enabled", "tunable", "candidates", "choices", "AutotunedLauncher", "measure", "schedule_with", "NARROW",
           "FP32"]
