"""What a scatter kernel computes itself instead of loading (part of uniorch-fuse): its updates and
its indices, when pointwise generics nothing else reads compute them.

torch-mlir lowers index_put, index_add, scatter and scatter_add to `tm_tensor.scatter` with
`[N, depth]` indices and `[N, slice...]` updates; around it sit generics that gather the updates
(an embedding bag's rows times their padding mask, a graph network's weighted messages), flatten
them (scatter_add: one update per element, read through `tensor.extract`), and assemble the
coordinates (passes/scatter_coords.py). Each was a kernel writing a tensor the scatter read back.
Here the scatter's group takes them: the update's producer (seen through views that add or drop
unit dims) and the indices' producer, with up to three pointwise generics more that only those
read, through their operands or through a gather. codegen/scatter_updates.py evaluates them per
update element. Never a generic reading the scatter's destination: the kernel writes that in
place.
"""
from __future__ import annotations

from torch_mlir import ir

from uniorch.codegen import patterns as pat
from uniorch.codegen.domain import VIEW_OPS

from .fuse_common import _Group, _static

MAX_TAKEN = 4


class ScatterJoins:
    def take_scatter_operands(self, g: _Group, op: ir.Operation) -> None:
        dest = op.operands[2]
        taken: list = []
        for k in (0, 1):  # updates, indices
            v, views = op.operands[k], []
            while not isinstance(v.owner, ir.Block) and pat.op_of(v.owner).name in VIEW_OPS:
                view = pat.op_of(v.owner)
                if len(list(view.results[0].uses)) != 1 or self.top(view) != view or view in self.group_of:
                    break
                if [n for n in ir.RankedTensorType(view.operands[0].type).shape if n != 1] != \
                        [n for n in ir.RankedTensorType(view.results[0].type).shape if n != 1]:
                    break
                views.append(view)
                v = view.operands[0]
            else:
                if not isinstance(v.owner, ir.Block) and self._computable(pat.op_of(v.owner), v, dest, taken):
                    taken += [pat.op_of(v.owner)] + views
        for q in [x for x in taken if pat.is_generic(x)]:  # what only they read (a bf16 row before its widening)
            for w in list(pat.inputs(q)) + pat.captured_values(q):
                if len([x for x in taken if pat.is_generic(x)]) >= MAX_TAKEN:
                    break
                if not isinstance(w.owner, ir.Block) and isinstance(w.type, ir.RankedTensorType) \
                        and self._computable(pat.op_of(w.owner), w, dest, taken):
                    taken.append(pat.op_of(w.owner))
        gid = self.groups.index(g)
        for x in sorted(taken, key=self._pos):
            g.ops.insert(len(g.ops) - 1, x)
            self.group_of[x] = gid

    def _computable(self, p: ir.Operation, v: ir.Value, dest: ir.Value, taken: list) -> bool:
        """A pointwise generic computing `v` that the kernel can evaluate wherever it reads `v`:
        `v` its only result anything reads, read once or only by generics the kernel takes, its
        loops written in order."""
        if (any(p == x for x in taken) or p in self.group_of or self.top(p) != p or not pat.is_generic(p)
                or not pat.is_pointwise(p) or not _static(p)):
            return False
        readers = [self.top(u.owner) for u in v.uses]
        if len(readers) != 1 and not all(any(r == x for x in taken) for r in readers):
            return False  # read elsewhere too (read twice by what the kernel takes: evaluated twice)
        if any(r != v and list(r.uses) for r in p.results):
            return False  # (torch-mlir's scatter_add generic also yields coordinates; unread here)
        m = pat.indexing_maps(p)[list(p.results).index(v) + pat.num_inputs(p)]
        if not pat.is_identity_map(m):
            return False
        return not any(x == dest for x in list(pat.inputs(p)) + pat.captured_values(p))
