"""Which ATen ops capture decomposes before import.

torch-mlir's own table is the starting point: core ATen decompositions plus the overloads its
lowering needs (eval-mode batch norm's `_native_batch_norm_legit_no_training`, whose saved
statistics are zero-sized and break the direct lowering, among them). On top of it, uniorch adds
decompositions for ops torch-mlir imports but cannot lower in every mode (see each below).
"""
from __future__ import annotations

import functools
import math

import torch
from torch_mlir.extras.fx_decomp_util import get_decomposition_table

aten = torch.ops.aten


def _embedding_bag(
    weight,
    indices,
    offsets,
    scale_grad_by_freq=False,
    mode=0,
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
    padding_idx=-1,
):
    """`_embedding_bag` in modes "mean" (nn.EmbeddingBag's default) and "sum" with a padding index,
    as a gather plus segment sums (index_add).

    Why: torch-mlir lowers `embedding_bag` to linalg only in mode "sum" without padding_idx. Mean
    fails with "failed to legalize torch.aten.embedding_bag.padding_idx", sum with a padding index
    with "'tensor.cast' op operand type 'tensor<0xi64>' and result type 'tensor<Nxi64>' are cast
    incompatible". Plain sum stays torch-mlir's (it lowers); max mode is not handled here.
    Outputs follow ATen's CPU kernel: (bags, offset2bag, bag_size, max_indices).
    """
    if mode not in (0, 1) or (mode == 0 and padding_idx < 0):
        return NotImplemented
    n = indices.shape[0]
    num_bags = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
    starts = offsets[:num_bags]
    # offset2bag as ATen builds it: mark every bag start, running count - 1 is each index's bag.
    marks = torch.zeros(n + 1, dtype=indices.dtype).index_add(0, starts, torch.ones_like(starts, dtype=indices.dtype))
    offset2bag = torch.cumsum(marks, 0, dtype=indices.dtype)[:n] - 1
    keep = (indices != padding_idx).to(weight.dtype)  # padding_idx == -1: no padding index
    rows = weight.index_select(0, indices) * keep[:, None]
    if per_sample_weights is not None:  # ATen allows them in sum mode only
        rows = rows * per_sample_weights[:, None]
    bags = weight.new_zeros(num_bags, weight.shape[1]).index_add(0, offset2bag, rows)
    if mode == 0:
        zeros = offsets.new_zeros(num_bags)
        return bags, offset2bag, zeros, zeros.clone()
    counts = weight.new_zeros(num_bags).index_add(0, offset2bag, keep)
    bags = bags / counts.clamp(min=1)[:, None]  # empty bags stay zero, as in ATen
    bag_size = counts.to(offsets.dtype)  # non-padding indices per bag
    return bags, offset2bag, bag_size, bag_size.clone()


def _gelu(x, approximate="none"):
    """`gelu(approximate="tanh")` as ATen's own formula, with sqrt(2/pi) in full precision.

    Why: torch-mlir's lowering approximates pi by 22/7 in the tanh form (relative error up to
    ~1e-3, far beyond fp32 tolerance). Low-precision inputs compute in fp32 and round once, as
    ATen's CPU and CUDA kernels do. The erf form stays torch-mlir's.
    """
    if approximate != "tanh":
        return NotImplemented
    dtype = x.dtype
    if dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))
    return (0.5 * x * (1.0 + torch.tanh(inner))).to(dtype)


# Ops torch-mlir cannot take to linalg ("failed to legalize" at the backend contract, found by
# PyTorch's OpInfo suite: python -m uniorch.tools.opinfo_coverage), for which PyTorch's own
# decomposition table has a rewrite into ops it can. Only ops that fail today are listed, so
# nothing torch-mlir already lowers changes shape.
TORCH_DECOMPOSED = (
    "addmv", "copysign", "as_strided_copy", "narrow_copy", "view_copy", "permute_copy", "unbind_copy",
    "dist",
)


def _half_mean(x, dim=None, keepdim=False, dtype=None):
    """fp16/bf16 `mean` as an fp32 sum divided in fp32, rounded once, as ATen computes it.

    Why: torch-mlir divides by the element count in the input's dtype; 65536 overflows fp16 to
    inf, so a long fp16 mean came out NaN (and shorter ones were rounded twice)."""
    if dtype is not None or x.dtype not in (torch.float16, torch.bfloat16):
        return NotImplemented
    dims = list(range(x.dim())) if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0) else dim
    dims = [dims] if isinstance(dims, int) else list(dims)
    count = 1
    for d in dims:
        count *= x.shape[d]
    return (torch.sum(x, dims, keepdim, dtype=torch.float32) / count).to(x.dtype)


def _from_torch(names) -> dict:
    from torch._decomp import decomposition_table as torch_table

    out = {}
    for name in names:
        packet = getattr(aten, name)
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if op in torch_table and not overload.endswith("out"):
                out[op] = torch_table[op]
    return out


@functools.cache
def decomposition_table() -> dict:
    table = dict(get_decomposition_table())
    table[aten._embedding_bag.default] = _embedding_bag
    table[aten.gelu.default] = _gelu
    from .nan_semantics import TABLE as nan_preserving

    table.update(nan_preserving)
    table.update(_from_torch(TORCH_DECOMPOSED))
    table[aten.mean.dim] = _half_mean
    table[aten.mean.default] = lambda x, dtype=None: _half_mean(x, None, False, dtype)
    return table
