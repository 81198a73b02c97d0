"""Contraction kernels, schedule: tile sizes, warps and stages per target (or the one recorded on
the kernel by the schedule pass)."""
from __future__ import annotations

from torch_mlir import ir

from uniorch.ir import dims

from .contraction_plan import _Plan, _analyze
from .source import CodegenError


def _target_kind(target) -> tuple[str, int]:
    """("interpret" | "cuda" | "rocm", warp width) of a target string `vendor[:arch]`."""
    from uniorch.targets import TargetError, parse_target

    try:
        t = parse_target(target or "interpret")
    except TargetError:
        text = str(target).lower()
        if text.startswith("interp"):
            return "interpret", 32
        amd = any(k in text for k in ("rocm", "hip", "amd", "gfx"))
        return ("rocm", 64) if amd else ("cuda", 32)
    if t.interpret:
        return "interpret", t.warp_size
    return ("rocm" if t.vendor == "rocm" else "cuda"), t.warp_size


def _pow2(n: int) -> int:
    return 1 << max(0, int(n - 1).bit_length())


def _fit(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, _pow2(n)))


def _schedule(plan: _Plan, target: str) -> dict:
    kind, warp = _target_kind(target)
    hints = dims.hints(plan.func)  # symbolic sizes: tiles tuned for the capture's sizes
    M, N, K = (dims.hinted(x, hints) for x in (plan.M, plan.N, plan.K))
    narrow = all(t in ("f16", "bf16") for t in plan.dot_types)
    if kind == "interpret":
        # Few, mid-sized programs: the interpreter's cost is per program and per op, not per element.
        bm, bn, bk = _fit(M, 16, 64), _fit(N, 16, 64), _fit(K, 16, 64)
        warps, stages, group = 4, 1, 1
        if plan.row_stats:
            bk = _row_tile(plan, plan.K)
        if plan.row_n:
            bn = _row_tile(plan, plan.N)
    else:
        if narrow:   # tensor cores / matrix cores: up to 128x128x64 tiles
            bm, bn, bk = _fit(M, 16, 128), _fit(N, 16, 128), _fit(K, 16, 64)
        else:        # fp32 "ieee" (and fp64) dots run on FMA units: smaller tiles
            bm, bn, bk = _fit(M, 16, 64), _fit(N, 16, 64), _fit(K, 16, 32)
        # a pooling epilogue keeps one accumulator per window element: smaller tiles, so they
        # stay in registers (at most twice the accumulator registers of one full-size tile)
        limit = 2 * (128 * 128 if narrow else 64 * 64)
        while plan.windows * bm * bn > limit and max(bm, bn) > 16:
            if bm >= bn:
                bm //= 2
            else:
                bn //= 2
        if plan.windowed:
            # a factor tile summed tap by tap lives in registers beside the accumulator: at 64 x 128
            # in bf16 on sm_90 `ptxas -v` reports spills (428 B a thread with Triton 3.6's ptxas,
            # 2.5 KB with 3.9's), at 16 none: K tiles of 16
            bk = 16
        if not narrow and plan.channels_last is not None and plan.channels_last in plan.order["n"]:
            # an fp32 weight gradient read channels-last (conv_layout.fma_channels_innermost):
            # at 64x64x32 on 4 warps Triton 3.6's ptxas spills 1 KB a thread for sm_90, at K 16 none
            bk = 16
        if plan.row_stats or plan.row_n:
            # a row is one K tile (statistics reduced from the A tile) or one N tile (from the
            # output tile): the other tiles shrink so a pipeline stage's A and B stay within 32 KB
            bk = _row_tile(plan, plan.K) if plan.row_stats else bk
            bn = _row_tile(plan, plan.N) if plan.row_n else bn
            size = 2 if narrow else 4
            while (bm + bn) * bk * size > 32 * 1024:
                if not plan.row_n and bn >= bm and bn > 16:
                    bn //= 2
                elif bm > 16:
                    bm //= 2
                elif not plan.row_stats and bk > 16:
                    bk //= 2
                else:
                    break
        # threads per program by tile area; warps of 32 (NVIDIA) or wavefronts of 64 (AMD)
        area = bm * bn
        threads = 256 if area >= 128 * 128 else 128 if area >= 64 * 64 else 64 if area >= 32 * 32 else 32
        warps = max(1, threads // warp)
        # NVIDIA: cp.async/TMA multi-stage pipeline; AMD's stream pipeliner wants 2 stages
        stages = 2 if kind == "rocm" else 3
        group = 8
    if plan.tile_rows is not None:
        # tile statistics: whole chunks of L rows per tile along their axis (contraction_stats.py)
        cls, L = plan.tile_rows
        # (a chunk of no power of two rows is one tile's: the block that holds it, no larger)
        b = max(16, _pow2(L)) if L & (L - 1) else max(bm if cls == "m" else bn, L)
        bm, bn = (b, bn) if cls == "m" else (bm, b)
    return {
        "block_m": bm, "block_n": bn, "block_k": bk, "group_m": group,
        "num_warps": warps, "num_stages": stages, "looped": True,
        "grid": _grid(plan, bm, bn),
    }


def _row_tile(plan: _Plan, n) -> int:
    if not isinstance(n, int):
        raise CodegenError(plan.gen, "row statistics over a symbolic row length")
    return max(16, _pow2(n))


def row_step(plan: _Plan, cls: str, block):
    """Rows between two programs' tiles along `cls` ("m" or "n"): the block, or the chunk of the
    kernel's tile statistics when that is no power of two (7 x 7 pixels): one chunk per tile, the
    rest of its block masked."""
    if plan.tile_rows is not None and plan.tile_rows[0] == cls and plan.tile_rows[1] & (plan.tile_rows[1] - 1):
        return plan.tile_rows[1]
    return block


def _grid(plan: _Plan, bm: int, bn: int) -> list:
    tiles = dims.prod([dims.cdiv(plan.M, row_step(plan, "m", bm)), dims.cdiv(plan.N, row_step(plan, "n", bn))])
    return [dims.grid_entry(tiles), dims.grid_entry(plan.B), 1]


def choose_schedule(kernel, target: str) -> dict:
    """Tile sizes, warps, stages and grid of a contraction kernel for `target`
    ("interpret", "cuda", "rocm")."""
    from .conv_layout import laid_out

    return _schedule(laid_out(_analyze(kernel), target), target)


def _recorded_schedule(func, plan: _Plan, target: str) -> dict:
    """The kernel's `uniorch.schedule` (if uniorch-schedule recorded one for this template)."""
    if "uniorch.schedule" not in func.attributes:
        return _schedule(plan, target)
    attr = ir.DictAttr(func.attributes["uniorch.schedule"])
    keys = ("block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages")
    if not all(k in attr for k in keys):
        return _schedule(plan, target)
    s = {k: ir.IntegerAttr(attr[k]).value for k in keys}
    for k in ("block_m", "block_n", "block_k"):
        if s[k] < 16 or s[k] & (s[k] - 1):
            raise CodegenError(func, f"schedule {k} = {s[k]} (tl.dot needs a power of two >= 16)")
    if plan.row_n and s["block_n"] < plan.N:
        raise CodegenError(func, f"schedule block_n = {s['block_n']}: row statistics need the row "
                                 f"({plan.N}) in one N tile")
    if plan.row_stats and s["block_k"] < plan.K:
        raise CodegenError(func, f"schedule block_k = {s['block_k']}: row statistics need the row "
                                 f"({plan.K}) in one K tile")
    if plan.tile_rows is not None:
        cls, L = plan.tile_rows
        if (s["block_" + cls] % L) if not L & (L - 1) else s["block_" + cls] < L:
            raise CodegenError(func, f"schedule block_{cls} = {s['block_' + cls]}: tile statistics need "
                                     f"whole chunks of {L} rows per tile")
    s["grid"] = _grid(plan, s["block_m"], s["block_n"])
    return s
