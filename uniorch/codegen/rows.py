"""What the one-dim-per-row kernels (scans, sorts) share: their parameter list and how a linear
row index becomes coordinates of the dims that are not scanned or sorted."""
from __future__ import annotations

import math


def row_params(in_ranks: list[int], out_ranks: list[int]) -> list[str]:
    """Pointer then one stride per dim for every input, then every output (docs/kernels.md §4)."""
    params = []
    for prefix, ranks in (("in", in_ranks), ("out", out_ranks)):
        for i, r in enumerate(ranks):
            params += [f"{prefix}{i}_ptr"] + [f"{prefix}{i}_s{d}" for d in range(r)]
    return params + ["BLOCK_P: tl.constexpr", "BLOCK_R: tl.constexpr"]


def row_coords(rank: int, dim: int, outer: list[int]) -> tuple[list[int], dict[int, str]]:
    """(the dims other than `dim`, their coordinate expressions in `rows`, row-major)."""
    outer_dims = [d for d in range(rank) if d != dim]
    coords, rest = {}, "rows"
    for j, d in enumerate(outer_dims):
        inner = math.prod(outer[j + 1:]) if j + 1 < len(outer) else 1
        coords[d] = f"({rest}) // {inner}" if inner > 1 else f"({rest})"
        if j + 1 < len(outer_dims):
            rest = f"rows % {inner}"
    return outer_dims, coords
