"""What uniorch-fuse's parts share: the group record, annotation names, and the predicates on
ops (static shapes, widening and rounding casts) that every joining rule asks."""
from __future__ import annotations

from dataclasses import dataclass, field

from torch_mlir import ir

from uniorch.codegen import patterns as pat
from uniorch.codegen.domain import Layout
from uniorch.ir import dims

# ops outlining copies into the kernels that read them (so their results are no kernel arguments)
_IN_KERNEL = ("arith.constant", "tensor.empty")
GROUP, DOMAIN, KIND = "uniorch.group", "uniorch.domain", "uniorch.kind"
TILE_STAT = "uniorch.tile_stat"  # passes/tile_stats.py: per-chunk partial sums of a contraction's output
# One tile of output channels on every target (contraction_schedule.py caps fp32 tiles at 64), so
# a fused prologue is computed once per input element and kernel window position, not per tile.
PROLOGUE_MAX_FILTERS = 64
# A matmul's factor prologue (LayerNorm's or RMSNorm's normalise before a linear layer) is computed
# once per tile of the other side's columns: a few flops per element each time, where the kernel
# that wrote it would store and the matmul load it again. Up to 4 tiles of recomputation.
MATMUL_PROLOGUE_MAX_N = 4 * PROLOGUE_MAX_FILTERS


@dataclass
class _Group:
    kind: str
    anchor: ir.Operation
    layout: Layout
    ops: list = field(default_factory=list)
    prologue: set = field(default_factory=set)  # pointwise producers evaluated in a conv's input tiles
    window: ir.Operation | None = None  # a pooling computed from per-window accumulators (try_join_window)


# ops whose `?` dims kernels can take as size arguments (the rest stay out of kernels)
_SYMBOLIC_OK = ("linalg.generic", "tensor.concat", "tm_tensor.scan", "tm_tensor.scatter", "tensor.pad",
                "tensor.insert_slice", "tm_tensor.sort", "tm_tensor.topk")


def _i64(v: int):
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


def _size_attr(s):
    """A static size as an integer, a symbolic one as its expression (uniorch/ir/dims.py)."""
    return _i64(s) if isinstance(s, int) else ir.StringAttr.get(dims.text(s))


def _static(op: ir.Operation) -> bool:
    """Shapes known (static, or `?` dims derived from the size symbols: uniorch/ir/dims.py) and,
    for a generic, loop bounds readable from its maps."""
    for v in list(op.operands) + list(op.results):
        if isinstance(v.type, ir.ShapedType) and not ir.ShapedType(v.type).has_static_shape:
            if not isinstance(v.type, ir.RankedTensorType) or op.name not in _SYMBOLIC_OK:
                return False
            try:
                dims.shape(v)
            except dims.UnknownSize:
                return False
    if pat.is_generic(op):
        try:
            pat.loop_sizes(op)
            pat.indexing_maps(op)
        except (ValueError, KeyError):
            return False
    if op.name == "tm_tensor.scatter" and not _scatter_rows_agree(op):
        return False
    return True


def _scatter_rows_agree(op: ir.Operation) -> bool:
    """A scatter's updates and indices have as many rows, which its verifier checks only for
    static sizes. At a symbolic length, torch-mlir lowers `index_put` with a 2-D index (the
    gradient of T5's relative position bias) to s updates for s**2 indices: its broadcast of the
    values reads them at [i, 0, :], their first dim only. A kernel took the first s updates and
    the gradient was wrong. Such a scatter stays in PyTorch."""
    updates, indices = op.operands[0], op.operands[1]
    if all(ir.ShapedType(v.type).has_static_shape for v in (updates, indices)):
        return True
    try:
        return dims.same(dims.shape(updates)[0], dims.shape(indices)[0])
    except (dims.UnknownSize, IndexError):
        return False


def _widens(op) -> bool:
    """A pointwise generic that only widens its one input (`extf`, through any maps)."""
    return pat.is_cast_only(op, "arith.extf")


def _rounds(op) -> bool:
    """A pointwise generic that only rounds its one input to a narrower float (`truncf`)."""
    return pat.is_cast_only(op, "arith.truncf")


def _moves_or_widens(op) -> bool:
    """Data movement, or data movement with a widening cast (a 16-bit k or v repeated and read in
    fp32 by SDPA's decomposition): loaded through the contraction's index maps, cast in registers."""
    return pat.is_data_movement(op) or _widens(op)
