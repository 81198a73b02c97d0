"""Who else reads what a tile statistic would summarise (passes/tile_stats.py): partials of a max
pay only where no other kernel reads the activation for the same rows anyway, and one kernel's
partials share one chunk length."""
from __future__ import annotations

from torch_mlir import ir

from uniorch.codegen import patterns as pat

from .fuse_common import TILE_STAT


def unviewed(v):
    """`v` before the reshapes it is a view through."""
    while not isinstance(v.owner, ir.Block) and pat.op_of(v.owner).name in ("tensor.expand_shape",
                                                                           "tensor.collapse_shape"):
        v = pat.op_of(v.owner).operands[0]
    return v


def read_with_result(r0, x, depth: int = 4) -> bool:
    """Whether a reader of `r0`'s result (or of a view of it) also reads `x` (or a view of the
    value x is a view of)."""
    base = unviewed(x)
    stack = [(r, depth) for r in r0.results]
    while stack:
        v, d = stack.pop()
        for u in v.uses:
            user = pat.op_of(u.owner)
            if any(isinstance(w.type, ir.ShapedType) and unviewed(w) == base for w in user.operands):
                return True
            if d and user.name in ("tensor.expand_shape", "tensor.collapse_shape"):
                stack.append((user.results[0], d - 1))
    return False


def summed_whole_beside(r0, x, L: int, matches, replacing=None, depth: int = 3) -> bool:
    """Whether another reduction reads `x` (through views and one-input pointwise ops: a
    widening) and would not read partials of `L` rows itself: a kernel then reads x anyway, and
    the max rides along in it for free. `matches(reduction)`: its partials' match (with .L) or None."""
    stack = [(unviewed(x), depth)]
    while stack:
        v, d = stack.pop()
        for u in v.uses:
            user = pat.op_of(u.owner)
            if user == pat.op_of(r0) or (replacing is not None and user == replacing) or not user.results \
                    or TILE_STAT in user.attributes:
                continue  # (partials already: they ride on the contraction)
            if user.name in ("tensor.expand_shape", "tensor.collapse_shape") and d:
                stack.append((user.results[0], d))
            elif pat.is_generic(user) and pat.is_pointwise(user) and pat.num_inputs(user) == 1 and d:
                stack.append((user.results[0], d - 1))
            elif pat.is_generic(user) and pat.is_reduction(user) and not pat.is_contraction(user):
                found = matches(user)
                if found is None or found.L != L:
                    return True
    return False


def chunk_lengths(product, depth: int = 8) -> set[int]:
    """The chunk lengths of the partials already taken from `product`'s tile (through pointwise
    epilogue ops)."""
    found, stack, seen = set(), [(r, depth) for r in product.results], 0
    while stack and seen < 256:
        v, d = stack.pop()
        for u in v.uses:
            user = pat.op_of(u.owner)
            seen += 1
            if TILE_STAT in user.attributes:
                found.add(ir.IntegerAttr(user.attributes[TILE_STAT]).value)
            elif d and pat.is_generic(user) and pat.is_pointwise(user) and user.results:
                stack.extend((r, d - 1) for r in user.results)
    return found


__all__ = ["unviewed", "read_with_result", "summed_whole_beside", "chunk_lengths"]
