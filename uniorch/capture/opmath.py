"""fp16/bf16 ops that ATen computes in fp32 ("opmath") and rounds once: the same at capture.

ATen's kernels for norms, variances, softmax and the samplers upcast 16-bit inputs, compute in
fp32 and round only the result. torch-mlir lowers the same ops in the input type, so a sum of
squares overflows fp16 (rms_norm or vector_norm of values ~300 gave 0 or inf: wrong answers
OpInfo found) and softmax loses bits over long rows. Each op listed here, given a 16-bit float
input, becomes: inputs cast to fp32, the op (or its decomposition) in fp32, float results cast
back to the input's type, which is the dtype ATen returns for all of them.
"""
from __future__ import annotations

import struct

import torch
import torch.utils._pytree as pytree

aten = torch.ops.aten

LOW = (torch.float16, torch.bfloat16)

OPS = (
    aten.rms_norm.default, aten._fused_rms_norm.default, aten.linalg_vector_norm.default,
    aten.var.correction, aten.var_mean.correction, aten.std.correction, aten.std_mean.correction,
    aten._softmax.default, aten._log_softmax.default, aten.logsumexp.default,
    aten.grid_sampler_2d.default, aten.grid_sampler_3d.default, aten._trilinear.default,
    aten.native_group_norm.default, aten.native_layer_norm.default,
    aten._native_batch_norm_legit_no_training.default, aten._native_batch_norm_legit.default,
    aten._native_batch_norm_legit.no_stats, aten.native_batch_norm.default,
    # pointwise ops torch-mlir lowers as several steps in the input type (GELU's x / sqrt(2), erf,
    # + 1, * 0.5, * x; sigmoid's -x, exp, + 1, 1 / ...), each rounded to 16 bits, where ATen's
    # kernel rounds once: 43% of a bf16 GELU's and 75% of a SELU's outputs differed from eager's
    aten.gelu.default, aten.sigmoid.default, aten.elu.default, aten.selu.default,
    # leaky_relu's slope is an opmath scalar in ATen (0.01, not bf16's 0.010009765625)
    aten.leaky_relu.default,
    # ATen's max + log1p(exp(-|a - b|)) in fp32 (capture/decompositions.py), not step by step in 16 bits
    aten.logaddexp.default, aten.logaddexp2.default,
    # accumulating scatters (the backward of embeddings, gathers and max pooling): one fp32 sum per
    # element rounded once, within eager's per-add rounding; Triton has no bf16 atomics everywhere
    aten.scatter_add.default, aten.index_add.default, aten.index_put.default, aten.scatter_reduce.two,
    aten.max_pool2d_with_indices_backward.default, aten.max_pool3d_with_indices_backward.default,
)


def _in_fp32(op, inner):
    def decomposed(*args, **kwargs):
        tensors = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        low = next((t.dtype for t in tensors if t.dtype in LOW), None)
        if low is None or not tensors or tensors[0].dtype != low:
            return inner(*args, **kwargs) if inner is not None else NotImplemented
        up = pytree.tree_map(lambda a: a.float() if isinstance(a, torch.Tensor) and a.dtype in LOW else a,
                             (args, kwargs))
        if "dtype" in up[1] and up[1]["dtype"] in LOW:  # an explicit 16-bit result type: round at the end
            up[1]["dtype"] = torch.float32
        out = inner(*up[0], **up[1]) if inner is not None else op(*up[0], **up[1])
        if out is NotImplemented:
            out = op(*up[0], **up[1])
        return pytree.tree_map(lambda t: t.to(low) if isinstance(t, torch.Tensor) and t.dtype == torch.float32
                               else t, out)

    decomposed.__name__ = f"_fp32_{op.__name__}"
    return decomposed


# a 16-bit tensor times (or over) a Python float: ATen's kernels keep the scalar at opmath
# precision (CUDA's opmath_symmetric_gpu_kernel_with_scalars, the CPU's scalar vector path), where
# torch-mlir rounds it to the tensor's type first: bf16 x * 0.1 used 0.10009765625, and 20% of the
# products (35% in fp16) differed from eager's. Scalars the 16-bit type holds exactly (0.125, 2.0)
# give the same product either way and are left as they are.
SCALAR_OPS = (aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar)


def _exact_in(b: float, dtype) -> bool:
    """Whether the 16-bit type holds `b` exactly (in Python: a tensor made while tracing would be
    recorded in the graph)."""
    try:
        if dtype == torch.float16:
            return struct.unpack("e", struct.pack("e", b))[0] == b
        bits = struct.unpack("<I", struct.pack("<f", b))[0]
    except (OverflowError, struct.error):
        return False
    return struct.unpack("<f", struct.pack("<I", bits))[0] == b and bits & 0xFFFF == 0  # bf16: f32's top half


def _with_fp32_scalar(op, inner):
    def decomposed(a, b, *rest, **kwargs):
        if isinstance(a, torch.Tensor) and a.dtype in LOW and isinstance(b, float) and not rest and not kwargs \
                and not _exact_in(b, a.dtype):
            return op(a.float(), b).to(a.dtype)
        return inner(a, b, *rest, **kwargs) if inner is not None else NotImplemented

    decomposed.__name__ = f"_fp32_scalar_{op.__name__}"
    return decomposed


def wrap(table: dict) -> dict:
    """`table` with every op of OPS computing 16-bit inputs in fp32 (around its own entry), and
    SCALAR_OPS taking an inexact Python float at fp32."""
    for op in OPS:
        table[op] = _in_fp32(op, table.get(op))
    for op in SCALAR_OPS:
        table[op] = _with_fp32_scalar(op, table.get(op))
    return table
