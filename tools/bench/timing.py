"""Timing: medians of many calls after warm-up, and the two measured peaks the roofline uses.

On CUDA each call is bracketed by device events, so launch overhead that overlaps earlier work is
not counted twice and host timer jitter stays out; on CPU `time.perf_counter` is the clock.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def median_ms(fn: Callable[[], object], device: str, warmup: int, iters: int) -> float:
    return timed_ms(fn, device, warmup, iters)[0]


def timed_ms(fn: Callable[[], object], device: str, warmup: int, iters: int) -> tuple[float, float]:
    """(median ms per call, host ms per call). The host time is that of the same calls, back to
    back, the clock stopped before the device is waited for: at or above the median, the device
    waited for launches and the row is bound by the host, not by its kernels."""
    for _ in range(warmup):
        fn()
    times = []
    if device == "cuda":
        torch.cuda.synchronize()
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        t = time.perf_counter()
        for start, end in pairs:
            start.record()
            fn()
            end.record()
        host = (time.perf_counter() - t) * 1e3 / iters
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in pairs]
    else:
        for _ in range(iters):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        host = sum(times) / iters
    return statistics.median(times), host


def wall_s(fn: Callable[[], object], device: str) -> tuple[float, object]:
    """Wall time of one call including everything it waits for: used for cold compiles."""
    sync(device)
    t = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - t, out


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def peak_copy_GBps(device: str, quick: bool) -> float:
    """Device-to-device copy bandwidth: bytes read + written per second (1 GiB buffers on GPU)."""
    n = (1 << 28 if not quick else 1 << 26) if device == "cuda" else 1 << 22   # fp32 elements
    src = torch.empty(n, device=device).uniform_()
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), device, warmup=3, iters=20 if device == "cuda" else 5)
    return 2 * n * 4 / (ms * 1e-3) / 1e9


def peak_bf16_tflops(device: str, quick: bool) -> float:
    """Dense bf16 matmul throughput (8192^3 on GPU, where tensor cores are saturated)."""
    n = (8192 if not quick else 4096) if device == "cuda" else 256
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    ms = median_ms(lambda: a @ b, device, warmup=3, iters=20 if device == "cuda" else 3)
    return 2 * n ** 3 / (ms * 1e-3) / 1e12
