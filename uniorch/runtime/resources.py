"""Kernels refitted to the device's shared memory.

Triton stages a loop's loads through shared memory, `num_stages - 1` tiles deep. How many bytes that
is depends on every tile the loop loads (a rotary prologue loads four tiles for one K tile), their
element size and the dot operands the kernel computes, and only the compiled kernel knows it (its
metadata's `shared`). The device's limit differs per arch: 227 KB per block on Hopper, 163 KB on
A100, 99 KB on the consumer parts, 64 KB of LDS on CDNA. A kernel over it fails at its first launch:
H200 run 3's llama_block fp32 attention (head dim 128, four rotary tiles and V per key tile) needed
384 KB, and attention was left to PyTorch, with a second bug behind it.

So a kernel over the limit is generated again one rung smaller, until it fits: first fewer stages
(the same tiles, less prefetch), then smaller tiles along the loop (the key tile of attention, K of
a matmul), then across. It happens at the trial launch, against the driver's own limit (Triton
raises OutOfResources), and, compiling ahead of time for a device that is not here, against the
limit of the target's arch.
"""
from __future__ import annotations

from typing import Callable, Optional

from torch_mlir import ir

from uniorch.codegen import CodegenError, generate
from uniorch.codegen.patterns import recorded_schedule

from .autotune import schedule_with

# bytes of shared memory one block may use (CUDA's opt-in maximum; LDS on AMD), by arch
SHARED_MEMORY = {
    "sm_70": 98304, "sm_72": 98304, "sm_75": 65536, "sm_80": 166912, "sm_86": 101376, "sm_87": 166912,
    "sm_89": 101376, "sm_90": 232448, "sm_90a": 232448, "sm_100": 232448, "sm_100a": 232448,
    "sm_103": 232448, "sm_120": 101376,
    "gfx908": 65536, "gfx90a": 65536, "gfx940": 65536, "gfx941": 65536, "gfx942": 65536, "gfx950": 163840,
    "gfx1100": 65536, "gfx1101": 65536, "gfx1200": 65536, "gfx1201": 65536,
}
REFITTED = ("attention", "chain", "contraction")  # the kernels that stage loads through shared memory


def shared_limit(target) -> Optional[int]:
    """The per-block shared memory of `target`'s arch, where it is known."""
    return SHARED_MEMORY.get(getattr(target, "arch", None) or "")


def out_of_shared_memory(err: BaseException) -> bool:
    """Whether `err` (or what caused it) is Triton refusing a kernel for its shared memory."""
    seen = 0
    while err is not None and seen < 8:
        text = str(err)
        if type(err).__name__ == "OutOfResources" and "shared" in text:
            return True
        if "out of resource: shared memory" in text:
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False


def smaller(kind: str, sched: dict) -> Optional[dict]:
    """The next rung down from `sched`, or None when the smallest is reached."""
    if int(sched.get("num_stages", 1)) > 1:
        return dict(sched, num_stages=int(sched["num_stages"]) - 1)
    along = ("block_n", "block_m") if kind in ("attention", "chain") else ("block_k", "block_n", "block_m")
    for key in along:
        if int(sched.get(key, 0)) > 16:
            return dict(sched, **{key: int(sched[key]) // 2})
    return None


def refit(kernel, target: str, load: Optional[Callable] = None, need: Optional[int] = None,
          limit: Optional[int] = None) -> Optional[dict]:
    """Generates `kernel` (a plan's `Kernel`) again one rung smaller, in place: its schedule on its
    MLIR function, its source, and with `load` its launcher. The new schedule, or None when no
    smaller one generates (the kernel cannot fit, and falls back as before).

    `need`: the bytes of shared memory the current schedule takes (the compiled kernel's metadata,
    or Triton's error), `limit` the arch's. Each compile of a rung is a whole Triton and ptxas
    compile (seconds for an attention kernel), so once two measured schedules differ only in their
    stages, rungs that `_predicted` puts clearly over the limit are passed without compiling: an
    fp32 rotary attention for sm_89 compiles 3 schedules instead of 5."""
    op = kernel.func_op
    if op is None or "uniorch.schedule" not in op.attributes:
        return None
    kind = ir.StringAttr(op.attributes["uniorch.kind"]).value
    if kind not in REFITTED:
        return None
    sched = recorded_schedule(op)
    measured = kernel.__dict__.setdefault("shared_measured", [])  # (schedule, bytes) of this kernel
    if need is not None:
        measured.append((dict(sched), int(need)))
    attr = ir.DictAttr(op.attributes["uniorch.schedule"])
    keys = ("num_stages", "block_m", "block_n", "block_k")
    while True:
        sched = smaller(kind, sched)
        if sched is None:
            op.attributes["uniorch.schedule"] = attr
            return None
        guess = _predicted(kind, measured, sched) if limit else None
        if guess is not None and guess > MARGIN * limit:
            continue
        op.attributes["uniorch.schedule"] = schedule_with(attr, **{k: sched[k] for k in keys if k in sched})
        try:
            ks = generate(op, target)
        except CodegenError:  # a rung this kernel cannot take (row statistics need their row in one tile)
            continue
        kernel.source = ks
        _record_grid(op, ks.grid)
        if load is not None:
            kernel.fn = load(ks)
        return sched


# a rung is passed only when predicted this far over the limit: the model is linear in the tiles,
# Triton's allocator is not (measured: key tiles halved took 17 % off, not 30 %)
MARGIN = 1.1


def _predicted(kind: str, measured: list, sched: dict) -> Optional[int]:
    """The shared memory `sched` should take, from two measured schedules of this kernel with the
    same tiles and different stages: a fixed part (attention's and a chain's query or row tile,
    which scales with block_m) and a part per stage (the loop's tiles, which scale with block_n
    for attention and chains, with block_k x (block_m + block_n) for matmuls). None without them."""
    def tiles(sc):
        return tuple(int(sc.get(k, 0)) for k in ("block_m", "block_n", "block_k", "block_d", "block_v"))

    for i, (s1, n1) in enumerate(measured):
        for s2, n2 in measured[i + 1:]:
            st1, st2 = int(s1.get("num_stages", 1)), int(s2.get("num_stages", 1))
            if tiles(s1) != tiles(s2) or st1 == st2:
                continue
            per_stage = (n1 - n2) / (st1 - st2)
            fixed = n1 - st1 * per_stage
            if per_stage <= 0 or fixed < 0:
                return None
            m0, n0, k0 = (max(1, int(s1.get(k, 1))) for k in ("block_m", "block_n", "block_k"))
            m, n, k = (max(1, int(sched.get(key, 1))) for key in ("block_m", "block_n", "block_k"))
            if kind in ("attention", "chain"):
                scale_fixed, scale_stage = m / m0, n / n0
            else:
                scale_fixed, scale_stage = m * n / (m0 * n0), k * (m + n) / (k0 * (m0 + n0))
            return int(fixed * scale_fixed + int(sched.get("num_stages", 1)) * per_stage * scale_stage)
    return None


def shared_need(err: BaseException) -> tuple[Optional[int], Optional[int]]:
    """(bytes required, the device's limit) from Triton's out-of-resources error, where it says."""
    import re

    seen = 0
    while err is not None and seen < 8:
        m = re.search(r"Required: (\d+), Hardware limit: (\d+)", str(err))
        if m:
            return int(m.group(1)), int(m.group(2))
        err, seen = err.__cause__ or err.__context__, seen + 1
    return None, None


def _record_grid(op, grid) -> None:
    """The recorded schedule's grid, as the new tiles make it (symbolic entries stay text)."""
    attr = ir.DictAttr(op.attributes["uniorch.schedule"])
    if "grid" not in attr:
        return
    i64 = ir.IntegerType.get_signless(64, attr.context)
    entries = {a.name: a.attr for a in attr}
    entries["grid"] = ir.ArrayAttr.get([ir.IntegerAttr.get(i64, g) if isinstance(g, int) else
                                        ir.StringAttr.get(str(g), context=attr.context) for g in grid],
                                       context=attr.context)
    op.attributes["uniorch.schedule"] = ir.DictAttr.get(entries, context=attr.context)


__all__ = ["SHARED_MEMORY", "out_of_shared_memory", "refit", "shared_limit", "shared_need", "smaller"]
