"""Inputs laid out anew before a kernel (KernelSource.relayout), on a GPU by a tiled transpose.

A kernel that reads an input faster with another dim innermost (an exact fp32 dot's B factor
N-major, a convolution's input channels-last) gets a copy in that layout before its launch.
PyTorch's `permute(...).contiguous()` copies a permuted tensor element by element in the
destination's order, so one side is read or written across its lines: on an H200 (run 6) its
`elementwise_kernel<128, 2>` took 1.5 ms per llama_block fp32 call to lay out 800 MB of weights,
about 1 TB/s of a 4.2 TB/s copy, and resnet_stack bf16's channels-last input 45 us against
Inductor's 16 for its own layout kernels. Here a 64x64 tile is read along the source's contiguous
dim and written along the destination's; Triton moves it between the two through shared memory,
so both sides are whole lines.

One kernel source per rank and pair of dims, sizes as launch arguments read off the tensor (so
every weight shape shares a compile), launched like the generated kernels (backends/triton_launch).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Optional

import torch

from uniorch.codegen.source import KernelSource
from uniorch.ir import dims

from . import frozen_layouts

BLOCK = 64
_LAUNCHERS: dict = {}
_LOCK = threading.Lock()


def relaid(t: torch.Tensor, order: list[int], warmup: bool = False) -> torch.Tensor:
    """`t`'s values with dims `order` (outermost first) laid out contiguously, in `t`'s own dim
    order. `warmup`: only compile the copy (runtime/compiler.py `_compile_ahead` queues every
    kernel's compile at once) and return a tensor of that layout whose values are not set."""
    if not warmup and frozen_layouts.frozen(t):  # freeze=True: a weight's copy made once
        return frozen_layouts.copy_of(t, order, lambda: _relaid(t, order))
    return _relaid(t, order, warmup)


def _relaid(t: torch.Tensor, order: list[int], warmup: bool = False) -> torch.Tensor:
    inverse = [order.index(d) for d in range(len(order))]
    src = t.permute(order)
    launch = _launcher(src) if t.is_cuda else None
    if launch is None:
        return src.contiguous().permute(inverse)
    out = torch.empty(src.shape, dtype=t.dtype, device=t.device)
    try:
        (launch.warmup if warmup else launch)([src], [out])
    except Exception:  # noqa: BLE001 - no compiler where a bundle runs, say: PyTorch's copy, from then on
        with _LOCK:
            _LAUNCHERS[_key(src)] = None
        return src.contiguous().permute(inverse)
    return out.permute(inverse)


def _launcher(src: torch.Tensor) -> Optional[object]:
    """The transpose's launcher for `src`'s rank and dims, or None where a plain copy does as well
    (the innermost dim already contiguous, nothing to tile) or Triton is not here."""
    n = src.dim()
    if n < 2 or src.numel() < 2 or src.stride(-1) == 1:
        return None
    key = _key(src)
    if key is None:
        return None
    with _LOCK:
        if key not in _LAUNCHERS:
            _LAUNCHERS[key] = _make(*key[:3])
        return _LAUNCHERS[key]


def _key(src: torch.Tensor) -> Optional[tuple]:
    """(rank, the source's contiguous dim, dtype, device), or None when no dim but the last has
    stride 1. That dim becomes the tile's rows, the destination's innermost its columns."""
    n = src.dim()
    j = min(range(n - 1), key=lambda d: (src.stride(d) if src.shape[d] > 1 else float("inf"), d))
    return (n, j, src.dtype, src.device) if src.stride(j) == 1 else None


def _make(n: int, j: int, dtype: torch.dtype):
    try:
        from uniorch.backends.triton_launch import TritonLauncher

        from .loader import load
    except ImportError:
        return None
    ks = kernel_source(n, j, dtype)
    return TritonLauncher(ks, load(ks, interpret=False))


def kernel_source(n: int, j: int, dtype: torch.dtype, block: int = BLOCK) -> KernelSource:
    """The copy of a rank-`n` tensor into a contiguous one of its shape, tiled over its dim `j`
    (stride 1 in the source) and its last dim (stride 1 in the destination)."""
    batch = [d for d in range(n - 1) if d != j]
    sizes = [f"s{d}" for d in range(n)]
    name = f"relayout_{n}d_{j}"
    idx = lambda p, d: f"{p}_s{d}"  # noqa: E731 - the stride parameter of tensor p's dim d
    lines = [
        "import triton.language as tl", "", "",
        "@jit",
        f"def {name}(in0_ptr, {', '.join(idx('in0', d) for d in range(n))}, "
        f"out0_ptr, {', '.join(idx('out0', d) for d in range(n))}, {', '.join(sizes)}, "
        "BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):",
        "    pid = tl.program_id(0).to(tl.int64)",
        f"    n_r = (s{j} + BLOCK_R - 1) // BLOCK_R",
        f"    n_c = (s{n - 1} + BLOCK_C - 1) // BLOCK_C",
        "    tile = pid % (n_r * n_c)",
        "    rest = pid // (n_r * n_c)",
        "    r = (tile // n_c) * BLOCK_R + tl.arange(0, BLOCK_R)",
        "    c = (tile % n_c) * BLOCK_C + tl.arange(0, BLOCK_C)",
        "    src = in0_ptr",
        "    dst = out0_ptr",
    ]
    for d in reversed(batch):  # the batch index, innermost batch dim first
        lines += [f"    b{d} = rest % s{d}", f"    rest = rest // s{d}",
                  f"    src += b{d} * {idx('in0', d)}", f"    dst += b{d} * {idx('out0', d)}"]
    lines += [
        f"    mask = (r[:, None] < s{j}) & (c[None, :] < s{n - 1})",
        f"    x = tl.load(src + r[:, None] * {idx('in0', j)} + c[None, :] * {idx('in0', n - 1)}, mask=mask)",
        f"    tl.store(dst + r[:, None] * {idx('out0', j)} + c[None, :] * {idx('out0', n - 1)}, x, mask=mask)",
        "",
    ]
    syms = [dims.symbol(s) for s in sizes]
    tiles = dims.prod([dims.cdiv(syms[j], block), dims.cdiv(syms[n - 1], block)] + [syms[d] for d in batch])
    ty = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64"}.get(dtype)
    return _Transpose(
        name=name, fn_name=name, source="\n".join(lines), input_ranks=[n], output_ranks=[n],
        grid=(dims.grid_entry(tiles), 1, 1), constexprs={"BLOCK_R": block, "BLOCK_C": block}, num_warps=4,
        num_stages=1, pointer_types=[f"*{ty}"] * 2 if ty else [], symbols=sizes,
        symbol_dims=[(0, d) for d in range(n)], rows=j)


@dataclass
class _Transpose(KernelSource):
    rows: int = 0  # the dim tiled as rows (the source's contiguous one); the last dim is the columns

    def launch_grid(self, values: list[int]) -> tuple[int, ...]:
        """The grid of the sizes `values` (s0, s1, ...), without the symbolic grid's sympy: this
        runs at every launch, beside launches of tens of microseconds."""
        block, j, n = self.constexprs["BLOCK_R"], self.rows, len(values)
        tiles = -(-values[j] // block) * -(-values[n - 1] // block)
        for d in range(n - 1):
            if d != j:
                tiles *= values[d]
        return (max(1, tiles), 1, 1)


__all__ = ["relaid", "kernel_source"]
