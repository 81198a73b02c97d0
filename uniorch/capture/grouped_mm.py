"""A mixture of experts' grouped matmul as a batched matmul that compiles: a decode step's rows
each with their expert's matrix, a prefill's rows in tiles of one expert each.

transformers' experts sort their rows by expert and multiply each expert's rows by its weight
matrix: `aten._grouped_mm(input [S, K], weight [E, K, N], offs)` (offs: each expert's cumulative
row end), or, where that op is unavailable or a compile of another dtype than bf16 would refuse
it, its own custom op `transformers::grouped_mm_fallback` with the same arguments, which loops
over the experts in Python after reading the row ends back to the host. Both ran in PyTorch: an
opaque op, one device-to-host copy and a matmul launch per expert.

* No more rows than experts (a decode step: batch x top-k rows): each row finds its expert by
  counting the group ends at or before it, and multiplies by that expert's matrix, gathered in the
  contraction's prologue (never written). That reads at most every expert's matrix once, the
  grouped matmul's worst case.
* More rows (a prefill): the rows are cut into tiles of `block` rows that each lie in one expert's
  group, as a grouped-GEMM kernel schedules them (each expert's rows start a new tile), and the
  tiles are one batched matmul: tile t gathers its rows (rows past its group's end read as 0) and
  its expert's matrix in the contraction's prologue. There are at most cdiv(S, block) + E tiles;
  the tiles past the last group's (a static count must cover any routing) repeat the last busy
  expert's matrix, which the tiles before them have just read. The output rows are gathered back
  from the tiles, a gather the consumer of the output can take into its own prologue.

Rows past the last group end are zero, as the custom op leaves them. Symbolic row counts keep the
op: the tile count and the tile size would depend on them.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

MAX_BLOCK = 128  # rows per tile, at most: a GEMM tile's rows
SYMBOLIC_BLOCK = 64  # rows per tile where the row count is symbolic (one compile for every prefill)


def block_rows(rows: int, experts: int) -> int:
    """Rows per tile: a power of two up to half the mean group, so that the tiles' padding (half a
    tile per group on average) stays under a quarter of the rows; at least 16, a tensor core's."""
    block = 16
    while block * 2 <= min(MAX_BLOCK, rows // (2 * experts)):
        block *= 2
    return block


def _zero(x):
    return torch.zeros((), dtype=x.dtype, device=x.device)


def _expert_of(index, ends):
    """The group of each index: the number of group ends at or before it (E past the last end)."""
    return (index[:, None] >= ends[None, :]).sum(1)


def _per_row(input, weight, ends):
    rows, experts = input.shape[0], weight.shape[0]
    index = torch.arange(rows, device=input.device, dtype=ends.dtype)
    expert = _expert_of(index, ends)
    out = torch.bmm(input[:, None, :], weight[expert.clamp(max=experts - 1)]).squeeze(1)
    return torch.where((index < ends[-1])[:, None], out, _zero(out))


def _tiled(input, weight, ends):
    rows, experts = input.shape[0], weight.shape[0]
    block = block_rows(rows, experts) if isinstance(rows, int) else SYMBOLIC_BLOCK
    ends = ends.long()
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    tiles = (ends - starts + block - 1) // block  # each group's tiles, cut at its own start
    tile_end = torch.cumsum(tiles, 0)
    tile_start = tile_end - tiles
    slots = (rows + block - 1) // block + experts
    slot = torch.arange(slots, device=input.device)
    busy_last = (ends < ends[-1]).sum().clamp(max=experts - 1)  # the last group holding rows
    expert = torch.minimum(_expert_of(slot, tile_end), busy_last)
    row = (starts[expert] + (slot - tile_start[expert]) * block)[:, None] + torch.arange(block, device=input.device)
    inside = (row < ends[expert][:, None]) & (slot < tile_end[-1])[:, None]
    a = torch.where(inside[..., None], input[row.clamp(max=rows - 1)], _zero(input))
    out_tiles = torch.bmm(a, weight[expert])
    index = torch.arange(rows, device=input.device)
    of_row = _expert_of(index, ends).clamp(max=experts - 1)
    # row r of expert e is row (r - start of e) of e's first tile on: one index into the tiles'
    # rows (torch-mlir lowers a pair of index tensors at symbolic sizes no more)
    out = out_tiles.flatten(0, 1)[tile_start[of_row] * block + index - starts[of_row]]
    return torch.where((index < ends[-1])[:, None], out, _zero(out))


def _rows(input, weight, offs):
    """`input @ weight[expert of row]` per row, or NotImplemented where the op is kept."""
    if offs is None or input.dim() != 2 or weight.dim() != 3 or offs.dim() != 1:
        return NotImplemented
    rows, experts = input.shape[0], weight.shape[0]
    if not isinstance(experts, int) or offs.shape[0] != experts or (isinstance(rows, int) and not rows):
        return NotImplemented
    input = input.to(weight.dtype)
    return _per_row(input, weight, offs) if isinstance(rows, int) and rows <= experts else _tiled(input, weight, offs)


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
