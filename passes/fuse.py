"""uniorch-fuse: decide which ops of `@main` run together in one kernel (docs/kernels.md §2).

Marks each op of a kernel with `uniorch.group = N`, and the group's anchor op with
`uniorch.domain = {parallel = [...], reduction = [...]}` and `uniorch.kind`. Groups are grown
greedily from seeds, in this order:

1. contractions (`patterns.is_contraction`, and convolutions as implicit GEMMs,
   `patterns.is_convolution`): take transposed A/B operands (pure permutations), a constant
   `tensor.pad` of a convolution's input (masked loads), a transposed convolution's zero-stuffed
   input (a strided insert_slice into a fill: loads on the stride's lattice), a fill or broadcast (bias) of the
   accumulator, pointwise epilogues over the output (bias, BatchNorm, activation, residual), and a
   pooling of the epilogue whose windows do not overlap, with pointwise ops after it;
2. reductions (incl. pooling and convolutions the contraction template does not take, computed directly): take pointwise producers and
   consumers over the same rows and other reductions over the same rows (softmax, LayerNorm,
   RMSNorm: one kernel each);
3. pointwise chains, broadcasts included (a group's domain grows with broadcasting consumers);
4. `tensor.insert_slice` / `pad` / `concat` not read as masked loads by a kernel above (pads and
   concats of tensors in memory join the reduction or pointwise kernel reading them): one "copy"
   kernel each;
5. `tm_tensor.scan` (cumsum, cumprod): one "scan" kernel each, with the fills of its outputs;
   `tm_tensor.sort` / `topk` likewise one "sort" kernel each (the index iota, topk's initial outs);
   `tm_tensor.scatter` one "scatter" kernel each (codegen/scatter.py).

An op joins a group only if `domain.Layout` places its loops on the group's domain with every
tensor it exchanges with members at the same positions (so values stay in registers), and no
path leaves the group and comes back (the kernel could not be launched as one unit). A producer
that is also used outside the group is cloned into it when cheap (fills, transposes, broadcasts,
a few arithmetic ops) and left out otherwise. Views, `tensor.empty`, constants and other `tm_tensor`
ops stay unannotated. Zero-result generics that only hold `cf.assert`s (shape checks torch-mlir emits
for batch norm) are erased: kernels cannot raise.

Parts: fuse_common.py (the group record, annotation names, cast predicates), fuse_factors.py (what a
contraction computes in its factor tiles: pads, concatenations, stuffed inputs, prologues),
fuse_windows.py (poolings on a contraction's epilogue), fuse_graph.py (the dependency graph and the cycle check).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from torch_mlir import ir

from uniorch.codegen import patterns as pat
from uniorch.codegen.domain import VIEW_OPS, Layout, is_unit_view
from uniorch.ir import dims

from .base import Pass, PassContext
from .fuse_common import DOMAIN, GROUP, KIND, TILE_STAT, _Group, _i64, _moves_or_widens, _rounds, _size_attr, _static, _widens
from .fuse_factors import FactorJoins
from .fuse_graph import DependencyGraph
from .fuse_scatter import ScatterJoins
from .fuse_windows import WindowJoins
from .ir_utils import main_func


def _feeds_one_epilogue(x) -> bool:
    """A widened value whose one reader is pointwise and reads nothing else full-size (a norm's
    scale and shift after a grouped convolution, the widening and the norm apart only because a
    view once stood between them): the reader joins next, so the widening is no copy."""
    users = {pat.op_of(u.owner) for u in x.results[0].uses}
    if len(users) != 1:
        return False
    (r,) = users
    if not pat.is_pointwise(r) or len(r.results) != 1:
        return False
    narrow = ir.RankedTensorType(x.operands[0].type).element_type
    if ir.RankedTensorType(r.results[0].type).element_type != narrow:
        return False  # the reader's result stays wide: storing the 16-bit value is half the bytes
    n = math.prod(ir.RankedTensorType(x.results[0].type).shape)
    return all(v == x.results[0] or not isinstance(v.type, ir.RankedTensorType)
               or (math.prod(ir.RankedTensorType(v.type).shape) < n and _parameter(v, 4)) for v in pat.inputs(r))


def _parameter(v: ir.Value, depth: int) -> bool:
    """Computed from the function's arguments alone (a norm's weight, not statistics a reduction
    of the activation gives, which the epilogue could not wait for)."""
    if isinstance(v.owner, ir.Block):
        return True
    p = pat.op_of(v.owner)
    if depth == 0 or not (p.name in ("tensor.expand_shape", "tensor.collapse_shape", "arith.constant")
                          or pat.is_pointwise(p)):
        return False
    return all(_parameter(w, depth - 1) for w in p.operands if isinstance(w.type, ir.ShapedType))


@dataclass(frozen=True)
class Fuse(Pass):
    name = "uniorch-fuse"
    summary = "group @main's ops into kernels (uniorch.group/domain/kind annotations)"
    max_ops: int = 64
    views: bool = True  # fuse through reshapes that only add/drop size-1 dims

    def run(self, module, pctx: PassContext) -> None:
        main = main_func(module)
        with module.context:
            _Fusion(main, self.max_ops, self.views).run()


SIBLING_REACH = 512  # block positions (see candidates)


class _Fusion(DependencyGraph, FactorJoins, WindowJoins, ScatterJoins):
    def __init__(self, main, max_ops: int, views: bool = True):
        self.main = main
        self.block = main.regions[0].blocks[0]
        self.max_ops = max_ops
        self.views = views
        self.take_widening = False  # admissible: a pure widening may join its producer's kernel

    # -- growing groups -----------------------------------------------------------------------------
    def run(self) -> None:
        for op in [o.operation for o in self.block.operations]:
            if pat.is_assert_only(op):
                op.erase()
        self.erase_dead()
        self.build_graph()
        self.groups: list[_Group] = []
        self.dead: list = []

        def seeds(pred):
            # a fresh snapshot each time: clones were inserted meanwhile
            for o in [o.operation for o in self.block.operations]:
                if o not in self.group_of and pat.is_generic(o) and _static(o) and o.results and pred(o):
                    yield o

        for o in list(seeds(lambda o: pat.is_contraction(o) or pat.is_convolution(o))):
            if o not in self.group_of:
                self.grow(self.new_group("contraction", o))
        for o in [o.operation for o in self.block.operations]:
            # per-chunk partial sums (passes/tile_stats.py) a full kernel did not take yet
            src = pat.inputs(o)[0] if TILE_STAT in o.attributes else None
            gid = None if src is None or isinstance(src.owner, ir.Block) else self.group_of.get(self.top(src.owner))
            if o not in self.group_of and gid is not None and gid >= 0 and self.groups[gid].kind == "contraction":
                self.try_join_tile_stat(self.groups[gid], o)
        for o in list(seeds(lambda o: pat.is_reduction(o) and not pat.is_contraction(o))):
            if o not in self.group_of:
                self.grow(self.new_group("reduction", o))
        for o in [o.operation for o in self.block.operations]:
            if o.name == "tm_tensor.scan" and _static(o):
                self.scan_group(o, "scan")
            elif o.name in ("tm_tensor.sort", "tm_tensor.topk") and _static(o) and _sorted_length_known(o):
                self.scan_group(o, "sort")
            elif o.name == "tm_tensor.scatter" and _static(o):
                self.take_scatter_operands(self.new_group("scatter", o), o)
        # a widening no reader took (one it could not take, e.g. a scale before attention's q):
        # its producer's kernel widens after all, and grows on from there as it would have
        for o in list(seeds(_widens)):
            src = o.operands[0]
            gid = None if isinstance(src.owner, ir.Block) else self.group_of.get(self.top(src.owner))
            if o not in self.group_of and gid is not None and gid >= 0 and not self._widened_on_load(o):
                g = self.groups[gid]
                self.take_widening = True
                try:
                    joined = self.try_join(g, o, "consumer")
                finally:
                    self.take_widening = False
                if joined:
                    self.grow(g)
        for o in list(seeds(pat.is_pointwise)):
            if o not in self.group_of:
                self.grow(self.new_group("pointwise", o))
        for o in [o.operation for o in self.block.operations]:
            if o.name in pat.COPY_OPS and _static(o) and o not in self.group_of:
                self.new_group("copy", o)
        self.drop_dead()
        self.annotate()

    def _widened_on_load(self, o: ir.Operation) -> bool:
        """Every reader of widening `o` is a pointwise generic no kernel took yet, read in loop
        order: its own kernel (grown below) loads the 16-bit value and widens it, so the producer
        stores 16 bits (a BatchNorm or GroupNorm normalise whose statistics no longer read it)."""
        users = [pat.op_of(u.owner) for u in o.results[0].uses]
        return bool(users) and all(
            self.top(u) == u and u not in self.group_of and pat.is_pointwise(u) and _static(u)
            and all(m == pat.indexing_maps(u)[-1] for v, m in zip(u.operands, pat.indexing_maps(u)) if v == o.results[0])
            for u in users)

    def erase_dead(self) -> None:
        """Drops side-effect-free ops nothing uses (what the erased checks alone read)."""
        pure = ("linalg.generic",) + pat.COPY_OPS + pat.GLUE_OPS
        changed = True
        while changed:
            changed = False
            for op in reversed([o.operation for o in self.block.operations]):
                if op.name in pure and op.name != "func.return" and op.results \
                        and all(len(list(r.uses)) == 0 for r in op.results):
                    op.erase()
                    changed = True

    def drop_dead(self) -> None:
        """Erases originals left unused by cloning, then anything that only fed them."""
        # filter before erasing: an erased op's address can be recycled, and hashes of ops
        # are only meaningful while they are alive
        for g in self.groups:
            g.ops = [o for o in g.ops if not any(o == d for d in self.dead)]
        for o in self.dead:
            o.erase()
        pure = ("linalg.generic",) + pat.COPY_OPS + VIEW_OPS
        changed = True
        while changed:
            changed = False
            for op in reversed([o.operation for o in self.block.operations]):
                if op.name in pure and op.results and all(len(list(r.uses)) == 0 for r in op.results):
                    for g in self.groups:
                        if op in g.ops:
                            g.ops.remove(op)
                            if g.anchor == op:
                                g.anchor = None
                    op.erase()
                    changed = True
        for g in self.groups:  # an anchor that died hands the annotations to a surviving op
            if g.anchor is None:
                g.anchor = next((o for o in g.ops if pat.is_generic(o)), None)
                if g.anchor is None:
                    g.ops = []

    def new_group(self, kind: str, op: ir.Operation) -> _Group:
        lay = Layout()
        lay.anchored_only = True
        if kind not in ("copy", "scan", "sort", "scatter"):
            lay.seed(op)
        g = _Group(kind, op, lay, [op])
        self.groups.append(g)
        self.group_of[op] = len(self.groups) - 1
        return g

    def scan_group(self, op: ir.Operation, kind: str) -> None:
        """A scan or sort is a kernel of its own (codegen/scan.py, sort.py); the fills of its
        operands after the first (a scan's initial output and accumulator, a sort's index iota,
        topk's initial outs) come along when nothing else reads them, so they are not launched as
        kernels of their own."""
        g = self.new_group(kind, op)
        for v in list(op.operands)[1:]:
            if isinstance(v.owner, ir.Block):
                continue
            p = pat.op_of(v.owner)
            if (self.top(p) == p and p not in self.group_of and pat.is_generic(p) and pat.is_fill(p)
                    and all(pat.op_of(u.owner) == op for r in p.results for u in r.uses)):
                g.ops.insert(0, p)
                self.group_of[p] = self.groups.index(g)

    def candidates(self, g: _Group):
        members = set(g.ops)
        cons, prods = [], []
        seen = set()  # the lists' members (lists keep the order; membership in a list was quadratic)
        for m in g.ops:
            for s in sorted(self.succs.get(m, ()), key=self._pos):
                if s not in members and s not in self.group_of and s not in seen and self._direct_user(m, s):
                    cons.append(s)
                    seen.add(s)
        taken = set()  # prods' members (an op may be both a consumer and a producer of the group)
        for m in g.ops:
            for p in sorted(self.preds.get(m, ()), key=self._pos):
                if p not in members and p not in self.group_of and p not in taken and self._direct_producer(p, m):
                    prods.append(p)
                    taken.add(p)
        seen |= taken
        sibs = []
        if g.kind in ("reduction", "pointwise"):
            # siblings: ungrouped ops reading a tensor a member reads (LayerNorm's mean and
            # variance of the same rows: one pass over the shared input instead of two), or sharing
            # its init (a tensor.empty or a fill, one per shape after CSE: no bytes saved, a launch
            # less, e.g. every layer's KV-cache copies in one pointwise kernel). Only within
            # SIBLING_REACH block positions of the group (which may grow along a model that way):
            # farther ones are nearly always a cycle away (every layer's RoPE reads the same cos
            # and sin, every LayerNorm shares an init), and trying each against every other layer's
            # was quadratic in the layers
            span = [p for p in (self._index.get(m) for m in g.ops) if p is not None]
            lo, hi = (min(span) - SIBLING_REACH, max(span) + SIBLING_REACH) if span else (None, None)
            for m in g.ops:
                for v in m.operands:
                    if not isinstance(v.type, ir.ShapedType):
                        continue
                    if not isinstance(v.owner, ir.Block) and self.top(v.owner) in members:
                        continue
                    for u in v.uses:
                        if lo is not None and not lo <= self._index.get(pat.op_of(u.owner), lo) <= hi:
                            continue
                        t = self.top(u.owner)
                        if (t is not None and t not in members and t not in self.group_of and t not in seen
                                and pat.op_of(u.owner) == t):
                            sibs.append(t)
                            seen.add(t)
        out = ([(c, "consumer", None) for c in cons] + [(p, "producer", None) for p in prods]
               + [(x, "sibling", None) for x in sorted(sibs, key=self._pos)])
        if self.views:
            views = self.view_candidates(g)
            if g.kind == "contraction":  # an iota behind a unit view read by the epilogue (a mask's
                # positions), not by the factors' prologue, whose loads take no views
                # and a pointwise consumer behind a unit view that a pooling reads (Conv1d → ReLU →
                # MaxPool1d: the pool works on an unsqueezed 2-d view), so the pool can follow
                views = [(x, r, v) for x, r, v in views if (r == "producer" and pat.is_fill(x))
                         or (r == "consumer" and pat.is_pointwise(x) and x.results
                             and any(pat.is_generic(pat.op_of(u.owner))
                                     and pat.pooling_window(pat.op_of(u.owner)) is not None
                                     for u in x.results[0].uses))]
                if views:  # the walk back from the anchor only when there is something to judge
                    before = self._before_anchor(g)
                    views = [(x, r, v) for x, r, v in views
                             if not any(self.top(u.owner) in before for u in v.results[0].uses)]
            out += views
        return out

    def _before_anchor(self, g: _Group) -> list:
        """The members of g its anchor is computed from (the factors' prologue), anchor included."""
        members = set(g.ops)
        out, stack = [g.anchor], [g.anchor]
        while stack:
            m = stack.pop()
            for v in m.operands:
                if isinstance(v.owner, ir.Block):
                    continue
                t = self.top(v.owner)
                if t in members and t not in out:
                    out.append(t)
                    stack.append(t)
        return out

    def view_candidates(self, g: _Group):
        """Consumers and producers one unit view (expand/collapse of size-1 dims) away."""
        members = set(g.ops)
        out = []
        for m in g.ops:
            if m.name in VIEW_OPS:
                continue
            for res in m.results:
                for u in res.uses:
                    v = pat.op_of(u.owner)
                    if v in members or self.top(v) != v or not is_unit_view(v):
                        continue
                    for u2 in v.results[0].uses:
                        x = pat.op_of(u2.owner)
                        if self.top(x) == x and x not in members and x not in self.group_of:
                            out.append((x, "consumer", v))
            for val in m.operands:
                if isinstance(val.owner, ir.Block):
                    continue
                v = pat.op_of(val.owner)
                if v in members or self.top(v) != v or not is_unit_view(v):
                    continue
                src = v.operands[0]
                if isinstance(src.owner, ir.Block):
                    continue
                p = pat.op_of(src.owner)
                if self.top(p) == p and p not in members and p not in self.group_of:
                    out.append((p, "producer", v))
        return out

    @staticmethod
    def _direct_user(m, s) -> bool:
        """s reads a result of m as an operand (not inside its body)."""
        return any(pat.op_of(u.owner) == s for r in m.results for u in r.uses)

    @staticmethod
    def _direct_producer(p, m) -> bool:
        return any(not isinstance(v.owner, ir.Block) and pat.op_of(v.owner) == p for v in m.operands)

    def grow(self, g: _Group) -> None:
        changed = True
        while changed and len(g.ops) < self.max_ops:
            changed = False
            for x, role, via in self.candidates(g):
                if len(g.ops) >= self.max_ops:
                    break
                if (self.try_join_view(g, x, role, via) if via is not None else self.try_join(g, x, role)):
                    changed = True
                    break

    def admissible(self, g: _Group, x: ir.Operation, role: str) -> bool:
        if not pat.is_generic(x) or not _static(x) or not x.results or TILE_STAT in x.attributes:
            return False
        if role == "producer" and _rounds(x) and not isinstance(x.operands[0].owner, ir.Block) \
                and pat.is_generic(pat.op_of(x.operands[0].owner)):
            # the 16-bit rounding of a value computed by another generic (a matmul's accumulator)
            # rides on that generic's kernel, which then stores 16 bits, not the f32 value
            return False
        if role == "consumer" and g.kind != "pointwise" and not self.take_widening and _widens(x) \
                and all(pat.is_generic(pat.op_of(u.owner)) for u in x.results[0].uses) and not _feeds_one_epilogue(x):
            # a bf16 value widened for the generics reading it: their kernels widen it on load (a
            # cheap producer, cloned into each), and this kernel stores it in 16 bits: half the
            # bytes both ways. (Read through a reshape or returned, it stays here; pointwise
            # groups grow after every reduction and contraction group took what it could.)
            return False
        if g.kind == "contraction":
            if any(isinstance(v.type, ir.ShapedType) for v in pat.captured_values(x)):
                return False  # gathers (an embedding of positions before a residual add): own kernel
            if role == "consumer":
                # a permuted copy that only matmuls read as a factor stays theirs to load through
                # their index maps (dOᵀ for an attention backward's keys-major chain): written
                # here, it was a second copy of the output
                return pat.is_pointwise(x) and not (pat.is_data_movement(x) and _factor_only(x))
            # producers: transposed A/B, the accumulator's fill; fills/broadcasts of epilogue inputs
            for m in g.ops:
                if not self._direct_producer(x, m):
                    continue
                if m == g.anchor:
                    n_in = pat.num_inputs(m)
                    for i, v in enumerate(m.operands):
                        if isinstance(v.owner, ir.Block) or pat.op_of(v.owner) != x:
                            continue
                        # factors: transposed or repeated (grouped-query attention's k and v);
                        # the accumulator starts from a fill or a broadcast (a convolution's bias)
                        ok = (_moves_or_widens(x) if i < n_in
                              else pat.is_fill(x) or _moves_or_widens(x))
                        if not ok:
                            return False
                elif not (pat.is_data_movement(x) or pat.is_fill(x) or pat.is_cheap(x)):
                    return False  # cheap: e.g. a 16-bit bias widened before its broadcast
            return True
        if g.kind == "reduction":
            if role == "sibling":
                return pat.is_reduction(x) and not pat.is_contraction(x)
            return pat.is_pointwise(x) or (pat.is_reduction(x) and not pat.is_contraction(x))
        return pat.is_pointwise(x)

    def try_join(self, g: _Group, x: ir.Operation, role: str) -> bool:
        if role == "producer" and self.feeds_stuffed_source(g, x):
            return False
        if x.name == "tensor.pad":
            return self.try_join_pad(g, x, role)
        if x.name == "tensor.concat":
            return self.try_join_concat(g, x, role)
        if x.name == "tensor.insert_slice":
            return self.try_join_stuffed(g, x, role)
        if g.kind == "contraction" and role == "producer" and self.try_join_prologue(g, x):
            return True
        if TILE_STAT in x.attributes:
            return g.kind == "contraction" and role == "consumer" and self.try_join_tile_stat(g, x)
        if g.kind == "contraction" and role == "consumer":
            if g.window is not None:
                return self.try_join_after_window(g, x)
            if pat.pooling_window(x) is not None:
                return self.try_join_window(g, x)
        if not self.admissible(g, x, role):
            return False
        members = set(g.ops)
        if self.feeds_loads(g, x):
            return False
        if self.gathers_computed(g, x):
            return False
        # users already marked dead (originals left unused by a clone, erased in drop_dead) do
        # not count: a dead unit view must neither force a clone nor be adopted into this group
        outside_users = [u for r in x.results for u in r.uses if self.top(u.owner) not in members
                         and self.group_of.get(self.top(u.owner)) != -1]
        # unit views of x read only by the group come along (softmax's keepdim reshapes)
        views = []
        if self.views and g.kind != "contraction":
            for u in outside_users:
                v = pat.op_of(u.owner)
                if (self.top(v) == v and is_unit_view(v) and v not in views and v not in self.group_of
                        and list(v.results[0].uses)
                        and all(self.top(w.owner) in members for w in v.results[0].uses)):
                    views.append(v)
        outside_users = [u for u in outside_users if pat.op_of(u.owner) not in views]
        members = members | set(views)
        clone = False
        if role == "producer" and outside_users and not self._returned_only(g, outside_users):
            if not pat.is_cheap(x):
                return False  # several consumers and not cheap: cut
            clone = True
            views = []
        trial = g.layout.copy()
        trial.views |= set(views)
        grow = g.kind == "pointwise" and role != "sibling"
        err = trial.try_add(x, allow_growth=grow)
        if err:
            return False
        if g.kind == "contraction" and role == "consumer":
            red = set(trial.domain.reduction)
            if any(l.dims() & red for l in trial.loops[x]):
                return False
        if not clone:
            for r, res in enumerate(x.results):
                if any(self.top(u.owner) not in members for u in res.uses) and not trial.storable(x, r):
                    return False
            if self.creates_cycle(g, x, views):
                return False
            g.ops.extend(views + [x])
            g.layout = trial
            for o in views + [x]:
                self.group_of[o] = self.groups.index(g)
            if role == "producer":
                self._move_to_readers(x)
            return True
        return self.join_clone(g, x, trial)

    def _move_to_readers(self, x: ir.Operation) -> None:
        """A producer whose readers are all in its new group takes the first one's graph position (as
        a clone does, `_clone_position`): the last group to take a shared fill gets the original."""
        gid = self.group_of.get(x)
        at = [self._index.get(s) for s in self.succs.get(x, ())]
        if at and None not in at and all(self.group_of.get(s) == gid for s in self.succs[x]):
            self._index[x] = max(self._index.get(x, 0), min(at))

    @staticmethod
    def _returned_only(g: _Group, outside_users) -> bool:
        """A pointwise producer whose value leaves only as a result of the function (an optimizer's
        new moment, read by the parameter's update and returned to be written back): the group
        computes and stores it, where a cut would store it in a kernel of its own and the group
        would load it back."""
        return g.kind == "pointwise" and all(u.owner.name == "func.return" for u in outside_users)

    def gathers_computed(self, g: _Group, x: ir.Operation) -> bool:
        """x and g together would gather from a value computed in the same kernel (gathers read
        memory): x gathers from a member, or a member gathers from x."""
        members = set(g.ops)
        if any(not isinstance(v.owner, ir.Block) and self.top(v.owner) in members for v in pat.captured_values(x)):
            return True
        return any(pat.is_generic(m) and any(not isinstance(v.owner, ir.Block) and self.top(v.owner) == x
                                             for v in pat.captured_values(m)) for m in g.ops)

    @staticmethod
    def feeds_loads(g: _Group, x: ir.Operation) -> bool:
        """x is read by a pad or concatenation of g's that is masked loads in a generic kernel:
        those read memory, so x cannot be computed in the same kernel."""
        return g.kind != "contraction" and any(pat.op_of(u.owner).name in ("tensor.pad", "tensor.concat")
                                               and pat.op_of(u.owner) in g.ops for r in x.results for u in r.uses)

    def clone_for(self, members: set, x: ir.Operation):
        """A clone of x before it, read by `members` instead of x, and in the graph; and the (user,
        operand number, result number) of each use moved, so `undo_clone` can move them back."""
        uses = [(pat.op_of(u.owner), u.operand_number, r) for r, res in enumerate(x.results) for u in res.uses]
        redirected = [(owner, i, r) for owner, i, r in uses if self.top(owner) in members]
        return self.clone_into(x, redirected), redirected

    def clone_into(self, x: ir.Operation, redirected: list, at=None) -> ir.Operation:
        """A clone of x before `at` (default x), which the uses `redirected` (user, operand number,
        result number) read instead, and in the graph at its first reader's position."""
        pos = self._clone_position(x, redirected)
        saved = self.detach(self.top(owner) for owner, _, _ in redirected)
        with ir.InsertionPoint(at if at is not None else x):
            y = pat.op_of(x.clone())
        for owner, i, r in redirected:
            owner.operands[i] = y.results[r]
        self.attach(saved, [(y, pos)])
        return y

    def _clone_position(self, x: ir.Operation, redirected: list) -> int:
        """Graph position of a clone of x for the readers `redirected`: the first reader's. Positions
        only need to grow along edges (`_return_bound`), and this one does: x's producers come
        before x, which comes before its readers. x's own position made every group that cloned a
        shared fill (LayerNorm's accumulator, one after CSE) span the model from that fill on, and
        each cycle check walk that far: quadratic in a model's layers."""
        at = [self._index.get(self.top(owner)) for owner, _, _ in redirected]
        known = [p for p in at if p is not None]
        if known and len(known) == len(at):
            return min(known)
        return self._index.get(x, len(self.ops))

    def undo_clone(self, x: ir.Operation, y: ir.Operation, redirected: list, also=()) -> None:
        """Takes back `clone_for`: the moved uses read x again and the clone y is erased (and the
        clones in `also`, which only y's users read, after it)."""
        gone = [y, *also]
        saved = self.detach(gone + [self.top(owner) for owner, _, _ in redirected])
        for owner, i, r in redirected:
            owner.operands[i] = x.results[r]
        self.ops = [o for o in self.ops if all(o != g for g in gone)]
        self.forget(*gone)
        for g in gone:
            g.erase()
        self.attach([entry for entry in saved if all(entry[0] is not g for g in gone)])

    def forget(self, *ops: ir.Operation) -> None:
        """Drops ops about to be erased from the groups' layouts: a trial layout's op infos are
        the group's own dict (Layout.copy shares it), so a refused trial leaves its ops there, and
        the next rehash would hash an erased op (MViT-v2's relative positions: 'the operation has
        been invalidated')."""
        for g in self.groups:
            for op in ops:
                g.layout.infos.pop(op, None)
                g.layout.loops.pop(op, None)

    def _adopt(self, g: _Group, x: ir.Operation) -> bool:
        g.ops.append(x)
        self.group_of[x] = self.groups.index(g)
        return True

    def try_join_view(self, g: _Group, x: ir.Operation, role: str, view: ir.Operation) -> bool:
        """x joins g together with the unit view between them (values stay in registers)."""
        if not self.admissible(g, x, role):
            return False
        members = set(g.ops)
        if self.feeds_loads(g, x) or self.feeds_loads(g, view):
            return False
        for v in pat.captured_values(x):
            if not isinstance(v.owner, ir.Block) and self.top(v.owner) in members:
                return False
        view_users = {self.top(u.owner) for u in view.results[0].uses}
        if role == "producer":
            sole = all(self.top(u.owner) == view for r in x.results for u in r.uses) and view_users <= members
            if not sole:
                return pat.is_cheap(x) and self.join_clone_through_view(g, x, view)
        cloned, original = None, view
        if role == "consumer" and not view_users <= members | {x}:
            # x's own operands (not what its body captures) read a clone of the view
            redirected = [(x, i, 0) for i, v in enumerate(x.operands) if v == view.results[0]]
            cloned = self.clone_into(view, redirected, at=x)
            view = cloned
        trial = g.layout.copy()
        trial.views.add(view)
        ok = trial.try_add(x, allow_growth=g.kind == "pointwise") is None
        if ok and role == "consumer":
            ok = all(trial.storable(x, r) for r, res in enumerate(x.results)
                     if any(self.top(u.owner) not in members for u in res.uses))
        ok = ok and not self.creates_cycle(g, x, [view])
        if not ok:
            if cloned is not None:  # point x back at the original view, drop the clone
                self.undo_clone(original, cloned, redirected)
            return False
        gid = self.groups.index(g)
        g.ops += [view, x]
        g.layout = trial
        self.group_of[view] = gid
        self.group_of[x] = gid
        return True

    def join_clone_through_view(self, g: _Group, x: ir.Operation, view: ir.Operation) -> bool:
        """Clones cheap producer x and the unit view after it for g's members reading the view."""
        members = set(g.ops)
        uses = [(pat.op_of(u.owner), u.operand_number) for u in view.results[0].uses
                if self.top(u.owner) in members]
        if not uses or len(x.results) != 1:
            return False
        first = min((self.top(o) for o, _ in uses), key=lambda o: [p.operation for p in self.block.operations].index(o))
        # the view's clone first (the members read it), then x's, which the view's clone reads;
        # both at the first reader's position in the graph (`_clone_position`)
        redirected = [(o, i, 0) for o, i in uses]
        v2 = self.clone_into(view, redirected, at=first)
        saved = self.detach([v2])
        with ir.InsertionPoint(v2):
            x2 = pat.op_of(x.clone())
        v2.operands[0] = x2.results[0]
        self.attach(saved, [(x2, saved[0][3] if saved else self._index.get(x, len(self.ops)))])
        trial = g.layout.copy()
        trial.views.add(v2)
        ok = trial.try_add(x2, allow_growth=g.kind == "pointwise") is None and not self.creates_cycle(g, x2, [v2])
        if not ok:
            self.undo_clone(view, v2, redirected, also=[x2])
            return False
        gid = self.groups.index(g)
        g.ops += [x2, v2]
        g.layout = trial
        self.group_of[x2] = gid
        self.group_of[v2] = gid
        for dead_view in ([view] if not list(view.results[0].uses) else []):
            self.dead.append(dead_view)
            self.group_of[dead_view] = -1
            if all(self.top(u.owner) == dead_view for u in x.results[0].uses):
                self.dead.append(x)
                self.group_of[x] = -1
        return True

    def join_clone(self, g: _Group, x: ir.Operation, trial: Layout) -> bool:
        """Clones cheap producer x for g's members; the original keeps its other users."""
        y, redirected = self.clone_for(set(g.ops), x)
        lay = g.layout.copy()
        err = lay.try_add(y, allow_growth=g.kind == "pointwise")
        if err or self.creates_cycle(g, y):
            self.undo_clone(x, y, redirected)
            return False
        g.ops.append(y)
        g.layout = lay
        self.group_of[y] = self.groups.index(g)
        if all(len(list(r.uses)) == 0 for r in x.results):
            self.dead.append(x)  # erased after annotation: erasing now could recycle its address
            self.group_of[x] = -1
        return True

    # -- annotations --------------------------------------------------------------------------------
    def adopt_empty_views(self) -> None:
        """A unit view of a `tensor.empty` (a shape only) whose users are all in one non-contraction
        group moves in with them, so the kernel builds it instead of taking it as an input."""
        for o in [o.operation for o in self.block.operations]:
            if not is_unit_view(o) or o in self.group_of:
                continue
            src = o.operands[0]
            if isinstance(src.owner, ir.Block) or pat.op_of(src.owner).name != "tensor.empty":
                continue
            gids = {self.group_of.get(self.top(u.owner)) for u in o.results[0].uses}
            if len(gids) == 1 and None not in gids and -1 not in gids:
                g = self.groups[gids.pop()]
                if g.kind != "contraction":
                    g.ops.append(o)
                    self.group_of[o] = self.groups.index(g)

    def annotate(self) -> None:
        if self.views:
            self.adopt_empty_views()
        order = {o.operation: i for i, o in enumerate(self.block.operations)}
        groups = [g for g in self.groups if g.ops]
        seen: dict = {}
        for n, g in enumerate(groups):
            for o in g.ops:
                assert o not in seen, f"uniorch-fuse: {o.name} put in two groups"
                seen[o] = n
        groups.sort(key=lambda g: min(order[o] for o in g.ops))
        for n, g in enumerate(groups):
            for o in g.ops:
                o.attributes[GROUP] = _i64(n)
            anchor = g.anchor
            if g.kind == "copy":
                par = list(ir.RankedTensorType(anchor.results[0].type).shape)
                red = []
            elif g.kind == "scan":  # rows of the scanned dim, each scanned serially
                shape = list(ir.RankedTensorType(anchor.results[0].type).shape)
                dim = ir.IntegerAttr(anchor.attributes["dimension"]).value
                par, red = shape[:dim] + shape[dim + 1:], [shape[dim]]
            elif g.kind == "sort":  # rows of the sorted dim (the input's: topk keeps fewer)
                shape = dims.shape(anchor.operands[0])
                dim = ir.IntegerAttr(anchor.attributes["dimension"]).value
                par, red = shape[:dim] + shape[dim + 1:], [shape[dim]]
            elif g.kind == "scatter":  # one lane per update element
                par = list(ir.RankedTensorType(anchor.operands[0].type).shape)
                red = []
            else:
                dom = g.layout.domain
                par = [dom.sizes[d] for d in dom.parallel]
                red = [dom.sizes[d] for d in dom.reduction]
            anchor.attributes[DOMAIN] = ir.DictAttr.get({
                "parallel": ir.ArrayAttr.get([_size_attr(s) for s in par]),
                "reduction": ir.ArrayAttr.get([_size_attr(s) for s in red]),
            })
            anchor.attributes[KIND] = ir.StringAttr.get(g.kind)


def _sorted_length_known(op) -> bool:
    """A sort kernel holds each row in one block: the sorted dim must be a number (the rows may be
    of symbolic count: a router's topk over a symbolic number of tokens)."""
    dim = ir.IntegerAttr(op.attributes["dimension"]).value
    return ir.RankedTensorType(op.operands[0].type).shape[dim] >= 0


def _factor_only(x) -> bool:
    """Whether every reader of `x`'s one result is a contraction reading it as a factor."""
    if len(x.results) != 1:
        return False
    uses = list(x.results[0].uses)
    for u in uses:
        c = pat.op_of(u.owner)
        if not (pat.is_generic(c) and pat.is_contraction(c)):
            return False
        if not any(i < pat.num_inputs(c) and v == x.results[0] for i, v in enumerate(c.operands)):
            return False
    return bool(uses)
