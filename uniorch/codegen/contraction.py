"""Contraction kernels: one tiled `tl.dot` per kernel, with its producers and epilogue fused.

A kernel of kind "contraction" (docs/kernels.md §3) holds exactly one `linalg.generic` with
reduction iterators whose body is `out + x * y`, where `x` and `y` are expressions of the
generic's inputs (plain loads, `arith.extf` of 16-bit loads, or a pointwise prologue that
`linalg-fuse-elementwise-ops` fused into the contraction, e.g. LayerNorm or bias+GELU feeding a
matmul). Around it: pointwise generics feeding its operands (transposes, broadcasts: folded into
the load addresses), a fill or any pointwise value initialising the accumulator (zero, a bias
broadcast), and pointwise generics over its output (the epilogue: bias, activation, residual,
scale, cast) applied to the accumulator in registers before the single store of every kernel
result.

The loop dimensions of the contraction are classified by where they occur:

    batch  parallel, used by x and y      -> grid axis 1 (scalar indices)
    M      parallel, used by x only       -> rows of the tile (BLOCK_M)
    N      parallel, used by y only       -> columns of the tile (BLOCK_N)
    K      reduction, used by x and y     -> the loop (BLOCK_K)

Several dimensions of one class are flattened (row-major, sizes baked in), which makes the same
template a matmul, a batch matmul, a matmul over a multi-dimensional reduction, and an implicit-GEMM
convolution (M = N·OH·OW, N = F, K = C·KH·KW: the input map `d2 * stride + d5 * dilation` is just an
affine address). Loads use the tensors' runtime element strides, so transposed/permuted operands are
read in place. Every index is an affine combination of loop dimensions (`Lin`); a value is
evaluated at such an index in one of four contexts: "a" (an x tile [BLOCK_M, BLOCK_K]), "b" (a y
tile [BLOCK_K, BLOCK_N]), "init" and "e" (output tiles [BLOCK_M, BLOCK_N], before and after the
K loop). Values of "a"/"b" that do not depend on K are computed once, before the loop.

Accumulation is fp32 (fp64 for fp64 operands); fp32 dots use `input_precision="ieee"`; f16/bf16
operands go to `tl.dot` as they are with an fp32 accumulator (the interpreter cannot multiply
bf16, so the "interpret" target widens bf16 tiles to fp32 first: products of 16-bit floats are
exact in fp32, so the result is the same).

`choose_schedule` returns {block_m, block_n, block_k, group_m, num_warps, num_stages, looped,
grid}; a `uniorch.schedule` with these keys recorded on the kernel is honoured by the generator.
`supports(op)` tells fusion whether one generic fits the template. Scalar body ops are translated
by body.py (shared with the generic code generator).

Anything outside this shape raises CodegenError; a kernel is never emitted on a guess.

Parts: contraction_ir.py (element types, `Lin`, IR helpers), contraction_plan.py (analysis),
contraction_schedule.py (tiles per target), contraction_emit.py (the Triton source), conv_layout.py
(convolutions on tensor cores read channels innermost).
"""
from __future__ import annotations

from .contraction_emit import _Emitter
from .contraction_plan import _analyze, supports
from .contraction_schedule import _recorded_schedule, choose_schedule
from .conv_layout import laid_out
from .source import KernelSource

__all__ = ["supports", "choose_schedule", "generate_contraction"]


def generate_contraction(kernel, target: str) -> KernelSource:
    """Triton source for one contraction kernel (docs/kernels.md §3-4) on `target`."""
    plan = laid_out(_analyze(kernel), target)  # convolutions read channels innermost (codegen/conv_layout.py)
    sched = _recorded_schedule(plan.func, plan, target)
    return _Emitter(plan, sched, target).build()
