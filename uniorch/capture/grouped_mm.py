"""A mixture of experts' grouped matmul, for as many rows as there are experts or fewer (a decode
step: batch x top-k rows), as a gathered batched matmul that compiles.

transformers' experts sort their rows by expert and multiply each expert's rows by its weight
matrix: `aten._grouped_mm(input [S, K], weight [E, K, N], offs)` (offs: each expert's cumulative
row end), or, where that op is unavailable or a compile of another dtype than bf16 would refuse
it, its own custom op `transformers::grouped_mm_fallback` with the same arguments, which loops
over the experts in Python after reading the row ends back to the host. Both ran in PyTorch: an
opaque op, one device-to-host copy and a matmul launch per expert, in every decode step.

Rewritten, each row finds its expert by counting the group ends at or before it, and multiplies
by that expert's matrix, gathered in the contraction's prologue (never written). That reads a
matrix per row, so only calls with no more rows than experts are rewritten: then it reads at most
what the grouped matmul's worst case reads (every expert's matrix once). Longer calls (a prefill)
and symbolic row counts keep the op. Rows past the last group end are zero, as the custom op
leaves them.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _rows(input, weight, offs):
    """`input @ weight[expert of row]` per row, or NotImplemented where the op is kept."""
    if offs is None or input.dim() != 2 or weight.dim() != 3 or offs.dim() != 1:
        return NotImplemented
    rows, experts = input.shape[0], weight.shape[0]
    if not isinstance(rows, int) or not isinstance(experts, int) or rows > experts or offs.shape[0] != experts:
        return NotImplemented
    index = torch.arange(rows, device=input.device, dtype=offs.dtype)
    expert = (index[:, None] >= offs[None, :]).sum(1)  # the groups ending at or before the row
    out = torch.bmm(input.to(weight.dtype)[:, None, :], weight[expert.clamp(max=experts - 1)]).squeeze(1)
    return torch.where((index < offs[-1])[:, None], out, torch.zeros((), dtype=out.dtype, device=out.device))


def _aten_grouped_mm(input, weight, offs=None, bias=None, out_dtype=None):
    if bias is not None or (out_dtype is not None and out_dtype != input.dtype):
        return NotImplemented
    return _rows(input, weight, offs)


def table() -> dict:
    """The rewrites, for the ops this process has: transformers registers its op on import."""
    out = {aten._grouped_mm.default: _aten_grouped_mm}
    try:
        out[torch.ops.transformers.grouped_mm_fallback.default] = _rows
    except (AttributeError, RuntimeError):  # transformers' MoE module not imported
        pass
    return out
