"""uniorch-fuse-depthwise: a depthwise convolution computed in the factor tiles of the convolution
that reads it, so its output (the widest activation of an inverted residual) is never written.

MobileNetV2's and EfficientNet's blocks expand the channels 4-6x with a 1x1 convolution, run a 3x3
or 5x5 depthwise convolution (BatchNorm, ReLU6 or SiLU) on the expanded activation and project it
back with another 1x1 convolution. After uniorch-fuse that is three kernels, and the depthwise
kernel writes the expanded activation for the projection to read back. Here the depthwise group
(the convolution, its prologue: the expansion's BatchNorm and activation over the zero-padded
input, and its pointwise epilogue) joins the projection's group when:
- the group's anchor is a depthwise convolution (codegen/chain_lead.py's form: the channels its
  one batch dim, no M, the pixels N, a window of at most `MAX_TAPS` taps as K), with no other
  reduction (no pooling or tile statistics);
- one value leaves the group, read only by the anchor of one other group of kind "contraction",
  a convolution or matmul, as its B factor (not its weights' side) through plain loop dims (a
  1x1 convolution of stride 1: every position it reads is one the depthwise convolution computes).

The depthwise convolution is marked `uniorch.window_producer`. Codegen
(codegen/contraction_window.py) evaluates it where the projection's B tile needs it: per K tile,
a loop over the taps adds `w[c, tap] * in[c, pixel + offset(tap)]` into a [channels, pixels]
tile. Each depthwise output is computed once per tile of the projection's output channels
(one tile up to 64 of them), a few multiply-adds per tap against the bytes of writing and reading
it.

A squeeze-excite between them (MobileNetV3, EfficientNet: `project(d * se(mean(d)))`) needs the
mean over all pixels first. Its per-chunk partial sums come from the depthwise kernel's epilogue
(passes/tile_stats.py). Then the depthwise group is cloned instead of moved: the original computes
only the partial sums (its output is no longer written), and the clone joins the projection, read
through the pointwise `d * s` in its B-side prologue. The depthwise convolution runs twice, and
the expanded activation is read twice but never written. A depthwise output read any other way
(a returned value, a backward, a full-size reduction) stays a kernel of its own.
"""
from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from uniorch.codegen import patterns as pat
from uniorch.codegen.attention_plan import _plan
from uniorch.codegen.contraction_ir import Lin, _lin
from uniorch.codegen.contraction_plan import WINDOW_PRODUCER

from .base import Pass, PassContext
from .fuse_common import TILE_STAT
from .fuse_row_stats import ROW_STAT
from .groups import group_of, join, kind_of, merge_each_group
from .ir_utils import main_func

MAX_TAPS = 49  # up to 7x7 windows: each tap is a gathered load and a multiply-add per element


@dataclass(frozen=True)
class FuseDepthwise(Pass):
    name = "uniorch-fuse-depthwise"
    summary = "compute a depthwise convolution in the factor tiles of the convolution reading it"

    def run(self, module, pctx: PassContext) -> None:
        main = main_func(module)
        with module.context:
            merge_each_group(main.regions[0].blocks[0], _try)


def _depthwise(ops):
    """The group's depthwise convolution, if it is the group's one reduction, or None."""
    anchors = [o for o in ops if kind_of(o) == "contraction"]
    if len(anchors) != 1 or not pat.is_convolution(anchors[0]):
        return None
    dw = anchors[0]
    if any(o != dw and TILE_STAT not in o.attributes and (ROW_STAT in o.attributes or pat.is_reduction(o))
           for o in ops):
        return None
    p = _plan(dw)
    if p.order["m"] or len(p.order["b"]) != 1 or not p.order["n"] or p.window is not None:
        return None
    if not isinstance(p.K, int) or p.K > MAX_TAPS or not all(isinstance(s, int) for s in p.sizes):
        return None
    return dw


def _try(members: dict, gid: int) -> bool:
    ops = members[gid]
    dw = _depthwise(ops)
    if dw is None:
        return False
    inside = set(ops)
    stats = {o for o in ops if TILE_STAT in o.attributes}
    leaving = [(r, pat.op_of(u.owner)) for o in ops if o not in stats for r in o.results for u in r.uses
               if pat.op_of(u.owner) not in inside]
    if not leaving or any(r != leaving[0][0] for r, _ in leaving):
        return False
    v = leaving[0][0]
    g_c = group_of(leaving[0][1])
    if g_c is None or g_c == gid or any(group_of(o) != g_c for _, o in leaving):
        return False
    anchors = [o for o in members[g_c] if kind_of(o) == "contraction"]
    if len(anchors) != 1 or not (pat.is_convolution(anchors[0]) or pat.is_contraction(anchors[0])):
        return False
    c = anchors[0]
    if not all(o == c and _b_factor_only(c, v) or _scales_b_factor(o, v, c) for _, o in leaving):
        return False
    if not stats:
        for o in ops:
            join(o, g_c)
        dw.attributes[WINDOW_PRODUCER] = ir.UnitAttr.get()
        return True
    return _clone_into(ops, stats, dw, v, [o for _, o in leaving], g_c)


def _scales_b_factor(o, v, c) -> bool:
    """o is pointwise over v's shape (a squeeze-excite's `d * s`), reads v element for element, and
    its one result is read by contraction c only, as its B factor through plain dims."""
    if not pat.is_pointwise(o) or len(o.results) != 1 or o == c:
        return False
    maps = pat.indexing_maps(o)
    ins = list(o.operands)[:pat.num_inputs(o)]
    if not pat.is_identity_map(maps[-1]) or any(x == v and not pat.is_identity_map(m) for x, m in zip(ins, maps)):
        return False
    return all(pat.op_of(u.owner) == c for u in o.results[0].uses) and _b_factor_only(c, o.results[0])


def _clone_into(ops, stats, dw, v, readers, g_c) -> bool:
    """The ops of the depthwise group that compute `v`, cloned before its first reader into group
    g_c (the depthwise convolution marked as a window producer), the readers pointed at the clone;
    the originals stay for the partial sums."""
    need, stack = [], [v]
    inside = set(ops) - stats
    while stack:
        w = stack.pop()
        if isinstance(w.owner, ir.Block):
            continue
        o = pat.op_of(w.owner)
        if o in inside and o not in need:
            need.append(o)
            stack.extend(o.operands)
    need = [o for o in ops if o in need]  # block order
    if any(not isinstance(x.owner, ir.Block) and pat.op_of(x.owner) in need for o in need
           for x in pat.captured_values(o)):
        return False  # a body reading another cloned op (a gather's table): not cloned here
    first = min(readers, key=_index_in_block)
    clones: dict = {}
    with ir.InsertionPoint(first):
        for o in need:
            y = pat.op_of(o.clone())
            for i, x in enumerate(y.operands):
                if not isinstance(x.owner, ir.Block) and pat.op_of(x.owner) in clones:
                    src = pat.op_of(x.owner)
                    y.operands[i] = clones[src].results[ir.OpResult(x).result_number]
            clones[o] = y
            join(y, g_c)
    new_v = clones[pat.op_of(v.owner)].results[ir.OpResult(v).result_number]
    for o in readers:
        for i, x in enumerate(o.operands):
            if x == v:
                o.operands[i] = new_v
    clones[dw].attributes[WINDOW_PRODUCER] = ir.UnitAttr.get()
    return True


def _index_in_block(op) -> int:
    block = op.operation.block
    return next(i for i, o in enumerate(block.operations) if o.operation == op)


def _b_factor_only(c, v) -> bool:
    """`v` is read by contraction `c` only as inputs on its B side (its map names no M dim), each
    result of that map a plain loop dim (plus size-1 dims: a 1x1 window)."""
    p = _plan(c)
    m_dims = set(p.order["m"])
    maps = pat.indexing_maps(c)
    n_in = pat.num_inputs(c)
    uses = [i for i, x in enumerate(c.operands) if x == v]
    if not uses or any(i >= n_in for i in uses):
        return False
    sizes = pat.loop_sizes(c)
    env = [Lin.cst(0) if s == 1 else Lin.dim(d) for d, s in enumerate(sizes)]  # a 1x1 window's dims
    for i in uses:
        if m_dims & pat.map_dims(maps[i]):
            return False
        for e in maps[i].results:
            lin = _lin(e, env, c)
            if lin.const or len(lin.terms) != 1 or lin.terms[0][1] != 1:
                return False
    return True


__all__ = ["FuseDepthwise", "MAX_TAPS"]
