"""uniorch-fuse's dependency graph between the top-level ops of `@main`: producers and users,
kept up to date as producers are cloned into groups, and the check that joining an op to a group
leaves the graph of kernels acyclic (a kernel is launched as one unit).
"""
from __future__ import annotations

from torch_mlir import ir

from uniorch.codegen import patterns as pat

from .fuse_common import _Group


class DependencyGraph:
    _positions = 0  # bumped whenever block positions (`_index`) are recomputed
    _extent_at = -1
    _spans: dict = {}  # group index -> (its op count, its span or None)
    _extent_list = None

    def top(self, op) -> ir.Operation | None:
        op = pat.op_of(op)
        while op.parent is not None and op.parent != self.main:
            op = op.parent
        return op if op.parent == self.main else None

    def _producers(self, op: ir.Operation) -> set:
        out = set()

        def visit(inner):
            for v in inner.operation.operands:
                if isinstance(v.owner, ir.Block):
                    continue
                t = self.top(v.owner)
                if t is not None and t != op and t in self.preds:
                    out.add(t)
            return ir.WalkResult.ADVANCE

        op.walk(visit)
        return out

    def build_graph(self) -> None:
        ops = [o.operation for o in self.block.operations]
        self.ops = [o for o in ops if o.name not in ("tensor.empty", "arith.constant", "func.return")]
        self._index = {o: i for i, o in enumerate(self.ops)}
        self._positions += 1
        self.preds = {o: set() for o in self.ops}
        self.succs = {o: set() for o in self.ops}
        for o in self.ops:
            ps = self._producers(o)
            self.preds[o] = ps
            for p in ps:
                self.succs[p].add(o)
        self.group_of: dict = {}

    def detach(self, tops) -> list:
        """Takes the top-level ops `tops` out of the graph before their operands change, which
        changes their hashes; `attach` puts them back. Cloning a producer for a group so changes
        a few of its members, and rebuilding every dict per clone was quadratic in a model's
        layers (docs/perf/compile_time.md)."""
        ops = [c for c in dict.fromkeys(t for t in tops if t is not None) if c in self.preds]
        for c in ops:
            for p in self.preds[c]:
                self.succs[p].discard(c)
            for s in self.succs[c]:
                self.preds[s].discard(c)
        return [(c, self.succs.pop(c), self.preds.pop(c), self._index.pop(c), self.group_of.pop(c, None))
                for c in ops]

    def attach(self, saved: list, new=()) -> None:
        """`detach`'s ops back in, hashed as they are now, their producers found again, with the
        ops in `new` (each at the position given with it: a clone takes its original's)."""
        for y, pos in new:
            self.ops.append(y)
            self._index[y], self.preds[y], self.succs[y] = pos, set(), set()
        for c, users, _, pos, gid in saved:
            self._index[c], self.preds[c], self.succs[c] = pos, set(), set(users)
            if gid is not None:
                self.group_of[c] = gid
        for c in [y for y, _ in new] + [c for c, *_ in saved]:
            self.preds[c] = self._producers(c)
            for p in self.preds[c]:
                self.succs[p].add(c)
        for c, users, *_ in saved:
            for s in users:
                self.preds[s].add(c)
        for gid in {entry[4] for entry in saved}:
            if gid is not None and gid >= 0:
                self.groups[gid].layout.rehash()

    def creates_cycle(self, g: _Group, x: ir.Operation, extra=()) -> bool:
        """Would a path leave g ∪ {x} (∪ extra) and come back once x joins g?"""
        inside = set(g.ops) | {x} | set(extra)
        bound = self._return_bound(inside, g)

        def reaches(starts) -> bool:
            seen, stack = set(), list(starts)
            while stack:
                o = stack.pop()
                if o in seen:
                    continue
                seen.add(o)
                if o in inside:
                    return True
                if self._index.get(o, -1) > bound:
                    continue
                gid = self.group_of.get(o)
                group_ops = self.groups[gid].ops if gid is not None and gid >= 0 else [o]
                for m in group_ops:
                    seen.add(m)
                    stack.extend(s for s in self.succs[m] if s not in seen)
            return False

        starts = [s for m in inside for s in self.succs[m] if s not in inside]
        return reaches(starts)

    def _return_bound(self, inside: set, g: _Group) -> int:
        """A block position past which no path gets back to `inside`: edges only go forward in the
        block, and only a group with members on both sides of the bound leads back across it, so
        the last inside op's position, extended over every other group straddling it, is one.
        Without it each check walked everything downstream of the group: quadratic in a model's
        layers (docs/perf/compile_time.md). The block's length where a position is unknown."""
        pos = [self._index.get(o) for o in inside]
        if any(p is None for p in pos):
            return len(self.ops)
        bound = max(pos)
        for lo, hi, i in self._extents():
            if lo > bound:
                break
            if hi > bound and self.groups[i] is not g:
                bound = hi
        return bound

    def _extents(self) -> list:
        """(first, last block position, index) of every group with ops, by first position. A
        group's span is kept until its op count or the block's positions change."""
        if self._extent_at != self._positions:
            self._extent_at, self._spans = self._positions, {}
        changed = False
        for i, g in enumerate(self.groups):
            n = len(g.ops)
            if self._spans.get(i, (None,))[0] != n:
                pos = [self._index.get(o) for o in g.ops]
                if not pos:
                    span = None
                elif any(p is None for p in pos):  # unknown: it straddles everything
                    span = (-1, len(self.ops), i)
                else:
                    span = (min(pos), max(pos), i)
                self._spans[i], changed = (n, span), True
        if changed or self._extent_list is None:
            self._extent_list = sorted(span for _, span in self._spans.values() if span is not None)
        return self._extent_list

    def _pos(self, op) -> int:
        """Block position, for ordering candidates (a clone shares its original's)."""
        i = self._index.get(op)  # a miss (not a top-level op, or its hash changed) looks in the list
        return i if i is not None else self.ops.index(op) if op in self.ops else 0

    def rebuild_graph(self) -> None:
        """After operands changed other than through `clone_for`. `hash(ir.Operation)` depends on
        the op's operands, so every dict and set keyed by ops is rebuilt, not just the edges."""
        dead = [o for o, gid in self.group_of.items() if gid == -1]
        self.build_graph()
        self.group_of = {o: i for i, g in enumerate(self.groups) for o in g.ops}
        self.group_of.update({o: -1 for o in dead})
        for g in self.groups:
            g.layout.rehash()
