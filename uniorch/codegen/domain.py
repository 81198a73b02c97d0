"""Iteration domains of fused groups, and where each op's loops sit in them.

A group (kernel) iterates one domain: parallel dims then reduction dims, sizes > 1 only. Every
`linalg.generic` in it gets its loops expressed as affine functions of the domain dims
(`Aff`): usually a loop *is* a domain dim (`p1`), a unit loop is the constant 0, and a loop that a
consumer reads through a convolution window is a sum (`p2 * 2 + r1`). Values then stay in
registers between ops as long as producer and consumer agree on every tensor element's position
(`check`). Fusion (passes/fuse.py) and codegen (generic.py) use the same solver, so what fusion
groups codegen can lay out.
"""
from __future__ import annotations

import math

from collections import Counter

from dataclasses import dataclass, field
from typing import Iterable

from torch_mlir import ir

from uniorch.ir import dims

from . import patterns as pat


# -- affine expressions over domain dims ------------------------------------------------------------
class Aff:
    """sum(coeff * atom) + const, atoms being domain dims or floordiv/mod/ceildiv of an Aff by a constant."""

    __slots__ = ("terms", "const", "_key")

    def __init__(self, terms: Iterable[tuple[tuple, int]] = (), const: int = 0):
        acc: dict[tuple, int] = {}
        for atom, c in terms:
            if c:
                acc[atom] = acc.get(atom, 0) + c
        self.terms = tuple(sorted(((a, c) for a, c in acc.items() if c), key=lambda t: repr(t[0])))
        self.const = int(const)
        self._key = (self.terms, self.const)

    # construction
    @staticmethod
    def dim(k: int) -> "Aff":
        return Aff([(("d", k), 1)])

    @staticmethod
    def constant(c: int) -> "Aff":
        return Aff((), c)

    def __add__(self, other: "Aff") -> "Aff":
        return Aff(list(self.terms) + list(other.terms), self.const + other.const)

    def scale(self, c: int) -> "Aff":
        return Aff([(a, k * c) for a, k in self.terms], self.const * c)

    def _div_like(self, kind: str, c: int) -> "Aff":
        if c <= 0:
            raise ValueError(f"affine {kind} by non-positive constant {c}")
        if not self.terms:
            v = self.const
            return Aff.constant(v // c if kind == "fdiv" else v % c if kind == "mod" else -((-v) // c))
        if c == 1:
            return self if kind != "mod" else Aff.constant(0)
        return Aff([((kind, self, c), 1)])

    def floordiv(self, c: int) -> "Aff":
        return self._div_like("fdiv", c)

    def ceildiv(self, c: int) -> "Aff":
        return self._div_like("cdiv", c)

    def mod(self, c: int) -> "Aff":
        return self._div_like("mod", c)

    # queries
    def __eq__(self, other) -> bool:
        return isinstance(other, Aff) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return self.code({})

    def pure_dim(self) -> int | None:
        if self.const == 0 and len(self.terms) == 1:
            (atom, c), = self.terms
            if atom[0] == "d" and c == 1:
                return atom[1]
        return None

    def is_const(self) -> bool:
        return not self.terms

    def dims(self) -> set[int]:
        out: set[int] = set()
        for atom, _ in self.terms:
            if atom[0] == "d":
                out.add(atom[1])
            else:
                out |= atom[1].dims()
        return out

    def bounds(self, sizes: list[int]) -> tuple[int, int]:
        """Inclusive range over the domain (dims in [0, size))."""
        lo = hi = self.const
        for atom, c in self.terms:
            if atom[0] == "d":
                alo, ahi = 0, sizes[atom[1]] - 1
            else:
                ilo, ihi = atom[1].bounds(sizes)
                k = atom[2]
                if atom[0] == "fdiv":
                    alo, ahi = ilo // k, ihi // k
                elif atom[0] == "cdiv":
                    alo, ahi = -((-ilo) // k), -((-ihi) // k)
                else:
                    alo, ahi = (ilo % k, ihi % k) if ihi - ilo < k and ilo % k <= ihi % k else (0, k - 1)
            if c >= 0:
                lo, hi = lo + c * alo, hi + c * ahi
            else:
                lo, hi = lo + c * ahi, hi + c * alo
        return lo, hi

    def code(self, names: dict[int, str], sizes: list[int] | None = None) -> str:
        """Triton/Python text; `names[k]` is domain dim k's index variable."""
        parts = []
        for atom, c in self.terms:
            if atom[0] == "d":
                a = names.get(atom[1], f"d{atom[1]}")
            else:
                inner = atom[1].code(names, sizes)
                k = atom[2]
                nonneg = sizes is not None and atom[1].bounds(sizes)[0] >= 0
                if atom[0] == "fdiv":
                    a = f"(({inner}) // {k})" if nonneg else f"_floordiv(({inner}), {k})"
                elif atom[0] == "mod":
                    a = f"(({inner}) % {k})" if nonneg else f"_floormod(({inner}), {k})"
                else:
                    a = f"(({inner}) + {k - 1}) // {k}" if nonneg else f"-_floordiv(-({inner}), {k})"
            parts.append(a if c == 1 else f"{a} * {c}" if c > 0 else f"-{a}" if c == -1 else f"{a} * ({c})")
        text = " + ".join(parts)
        if self.const or not parts:
            text = f"{text} + {self.const}" if parts and self.const > 0 else f"{text} - {-self.const}" if parts else str(self.const)
        return text.replace("+ -", "- ")

    def needs_floor_helpers(self, sizes: list[int]) -> bool:
        for atom, _ in self.terms:
            if atom[0] != "d":
                if atom[1].bounds(sizes)[0] < 0 or atom[1].needs_floor_helpers(sizes):
                    return True
        return False


def compose(expr: ir.AffineExpr, loops: list[Aff]) -> Aff:
    """`expr` (over an op's loop dims) with each loop dim replaced by its domain expression."""
    if isinstance(expr, ir.AffineDimExpr):
        return loops[expr.position]
    if isinstance(expr, ir.AffineConstantExpr):
        return Aff.constant(expr.value)
    if isinstance(expr, ir.AffineSymbolExpr):
        raise ValueError("affine symbols are not supported")
    lhs, rhs = compose(expr.lhs, loops), compose(expr.rhs, loops)
    if isinstance(expr, ir.AffineAddExpr):
        return lhs + rhs
    if isinstance(expr, ir.AffineMulExpr):
        if rhs.is_const():
            return lhs.scale(rhs.const)
        if lhs.is_const():
            return rhs.scale(lhs.const)
        raise ValueError(f"non-affine product {expr}")
    if not rhs.is_const():
        raise ValueError(f"division by a non-constant in {expr}")
    if isinstance(expr, ir.AffineFloorDivExpr):
        return lhs.floordiv(rhs.const)
    if isinstance(expr, ir.AffineModExpr):
        return lhs.mod(rhs.const)
    if isinstance(expr, ir.AffineCeilDivExpr):
        return lhs.ceildiv(rhs.const)
    raise ValueError(f"unsupported affine expression {expr}")


def compose_map(m: ir.AffineMap, loops: list[Aff]) -> list[Aff]:
    return [compose(e, loops) for e in m.results]


# -- ops --------------------------------------------------------------------------------------------
@dataclass
class OpInfo:
    """A linalg.generic's static facts."""

    op: ir.Operation
    sizes: list[int]
    iters: list[str]
    maps: list[ir.AffineMap]
    n_in: int
    used: list[bool]  # block argument i read by the body

    @staticmethod
    def of(op) -> "OpInfo":
        op = pat.op_of(op)
        maps = pat.indexing_maps(op)
        blk = pat.body(op)
        return OpInfo(op, pat.loop_sizes(op), pat.iterator_types(op), maps, pat.num_inputs(op),
                      [len(list(a.uses)) > 0 for a in blk.arguments])

    @property
    def operands(self) -> list[ir.Value]:
        return list(self.op.operands)  # live: fusion may redirect operands to clones

    @property
    def is_reduction(self) -> bool:
        return "reduction" in self.iters

    def result_map(self, r: int) -> ir.AffineMap:
        return self.maps[self.n_in + r]

    def shape(self, i: int) -> list[int]:
        t = self.operands[i].type
        return _shape_of(self.operands[i])


@dataclass
class Domain:
    sizes: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # "parallel" | "reduction"

    def copy(self) -> "Domain":
        return Domain(list(self.sizes), list(self.kinds))

    def add(self, size: int, kind: str) -> int:
        self.sizes.append(size)
        self.kinds.append(kind)
        return len(self.sizes) - 1

    @property
    def parallel(self) -> list[int]:
        return [d for d, k in enumerate(self.kinds) if k == "parallel"]

    @property
    def reduction(self) -> list[int]:
        return [d for d, k in enumerate(self.kinds) if k == "reduction"]


VIEW_OPS = ("tensor.expand_shape", "tensor.collapse_shape")


def _shape_of(v: ir.Value) -> list[int]:
    if not isinstance(v.type, ir.RankedTensorType):
        return []
    try:  # symbolic sizes as expressions (uniorch/ir/dims.py); -1 where none is known
        return dims.known_shape(v)
    except dims.UnknownSize:
        return list(ir.RankedTensorType(v.type).shape)


def is_unit_view(op) -> bool:
    """An expand/collapse_shape that only adds or drops size-1 dims: the same elements in the same
    order, so a value can flow through it in registers."""
    op = pat.op_of(op)
    if op.name not in VIEW_OPS:
        return False
    src, res = _shape_of(op.operands[0]), _shape_of(op.results[0])
    if any(isinstance(d, int) and d < 0 for d in src + res):
        return False
    return [d for d in src if d != 1] == [d for d in res if d != 1]


def nonunit(exprs: list[Aff], shape: list[int]) -> list[Aff]:
    return [e for e, s in zip(exprs, shape) if s != 1]


def realign(exprs: list[Aff], from_shape: list[int], to_shape: list[int]) -> list[Aff]:
    """Expressions of a tensor's dims, moved across a unit view onto the other shape's dims."""
    it = iter(nonunit(exprs, from_shape))
    return [next(it) if s != 1 else Aff.constant(0) for s in to_shape]


def _aliases(v: ir.Value) -> list[ir.Value]:
    """`v` and the values holding its elements in the same order through unit views."""
    root = v
    while not isinstance(root.owner, ir.Block) and is_unit_view(root.owner):
        root = pat.op_of(root.owner).operands[0]
    out, stack = [], [root]
    while stack:
        x = stack.pop()
        if x in out:
            continue
        out.append(x)
        for use in x.uses:
            if is_unit_view(use.owner):
                stack.append(pat.op_of(use.owner).results[0])
    return out


def _tensor_exprs_equal(a: list[Aff], shape_a: list[int], b: list[Aff], shape_b: list[int]) -> bool:
    return nonunit(a, shape_a) == nonunit(b, shape_b)


class Layout:
    """Loop expressions of the ops of one group over its domain, built op by op."""

    def __init__(self, domain: Domain | None = None):
        self.domain = domain or Domain()
        self.loops: dict[ir.Operation, list[Aff]] = {}
        self.infos: dict[ir.Operation, OpInfo] = {}
        self.views: set = set()  # unit views inside the group: values pass through them
        # fusion deciding membership refuses unanchored ops (`_unanchored`); codegen laying out a
        # decided kernel places its ops in another order, where one may be unanchored for a while
        self.anchored_only = False

    def copy(self) -> "Layout":
        lay = Layout(self.domain.copy())
        lay.loops = dict(self.loops)
        lay.infos = self.infos
        lay.views = set(self.views)
        lay.anchored_only = self.anchored_only
        return lay

    def rehash(self) -> None:
        """Re-keys the op dicts: an op's hash changes with its operands (fusion redirects them)."""
        self.loops = dict(list(self.loops.items()))
        self.views = set(list(self.views))
        items = list(self.infos.items())
        self.infos.clear()
        self.infos.update(items)

    def info(self, op) -> OpInfo:
        op = pat.op_of(op)
        if op not in self.infos:
            self.infos[op] = OpInfo.of(op)
        return self.infos[op]

    def __contains__(self, op) -> bool:
        return pat.op_of(op) in self.loops

    # tensors as domain expressions
    def result_exprs(self, op, r: int) -> list[Aff]:
        inf = self.info(op)
        return compose_map(inf.result_map(r), self.loops[inf.op])

    def operand_exprs(self, op, i: int) -> list[Aff]:
        inf = self.info(op)
        return compose_map(inf.maps[i], self.loops[inf.op])

    def through_views(self, v: ir.Value) -> ir.Value:
        """The value `v` views, through the group's unit views."""
        while not isinstance(v.owner, ir.Block) and pat.op_of(v.owner) in self.views:
            v = pat.op_of(v.owner).operands[0]
        return v

    def producer_of(self, v: ir.Value):
        """(op, result index) if `v` is a result of a laid-out op (or a group view of one)."""
        v = self.through_views(v)
        owner = v.owner
        if isinstance(owner, ir.Block):
            return None
        owner = pat.op_of(owner)
        if owner in self.loops:
            for r, res in enumerate(owner.results):
                if res == v:
                    return owner, r
        return None

    def consumers_of(self, op) -> list[tuple[ir.Operation, int, int]]:
        """(consumer op, operand index, result index) for laid-out ops reading `op`'s results,
        directly or through the group's views."""
        out = []
        for r, res in enumerate(pat.op_of(op).results):
            stack = [res]
            while stack:
                val = stack.pop()
                for use in val.uses:
                    user = pat.op_of(use.owner)
                    if user in self.views:
                        stack.append(user.results[0])
                    elif user in self.loops:
                        out.append((user, use.operand_number, r))
        return out

    def produced_exprs(self, op, r: int, shape: list[int]) -> list[Aff]:
        """Result r of a laid-out op as seen through views, on a tensor of `shape`."""
        inf = self.info(op)
        return realign(self.result_exprs(op, r), _shape_of(inf.op.results[r]), shape)

    # -- adding an op -------------------------------------------------------------------------------
    def seed(self, op) -> None:
        inf = self.info(op)
        loops = []
        for size, it in zip(inf.sizes, inf.iters):
            loops.append(Aff.constant(0) if size == 1 else Aff.dim(self.domain.add(size, it)))
        self.loops[inf.op] = loops

    def derive(self, op, allow_growth: bool = False, full_rows: bool = True) -> list[Aff] | str:
        """Loop expressions for `op` consistent with the laid-out ops it exchanges tensors with,
        or the reason there are none. May add domain dims when `allow_growth` (returned layout
        state is only changed by `add`)."""
        inf = self.info(op)
        n = len(inf.sizes)
        got: list[Aff | None] = [None] * n

        def constrain(k: int, e: Aff) -> str | None:
            if got[k] is None:
                got[k] = e
            elif got[k] != e:
                return f"loop d{k} would be both {got[k]} and {e}"
            return None

        # from producers: X reads T at map(loops) == producer's exprs of T
        for i, v in enumerate(inf.operands):
            if not inf.used[i]:
                continue
            prod = self.producer_of(v)
            if prod is None:
                continue
            texprs = self.produced_exprs(*prod, inf.shape(i))
            for j, e in enumerate(inf.maps[i].results):
                if inf.shape(i)[j] == 1:
                    continue
                if isinstance(e, ir.AffineDimExpr):
                    err = constrain(e.position, texprs[j])
                    if err:
                        return err
        # from consumers: X's result r at out_map(loops) == what the consumer reads
        for user, i, r in self.consumers_of(inf.op):
            uinf = self.info(user)
            if not uinf.used[i]:
                continue
            shape = _shape_of(inf.op.results[r])
            texprs = realign(self.operand_exprs(user, i), uinf.shape(i), shape)
            for j, e in enumerate(inf.result_map(r).results):
                if shape[j] == 1:
                    continue
                if isinstance(e, ir.AffineDimExpr):
                    err = constrain(e.position, texprs[j])
                    if err:
                        return err
                else:
                    return f"output map result {e} is not a loop dim"
        for k in range(n):
            if got[k] is None and inf.sizes[k] == 1:
                got[k] = Aff.constant(0)
        # hints: an outside tensor X reads that a laid-out op reads too, at pure domain dims
        if any(g is None for g in got):
            self._hint(inf, got)
        domain = self.domain
        err = self._unanchored(inf, got)
        if err:
            return err
        if any(g is None for g in got):
            used = {g.pure_dim() for g in got if g is not None} - {None}
            for k in range(n):
                if got[k] is not None:
                    continue
                # a reduction loop needs a reduction dim; a parallel loop takes any free dim of its
                # size (a pointwise op over whole rows runs along the reduction dims), its own kind first
                cands = [d for d in range(len(domain.sizes))
                         if d not in used and domain.sizes[d] == inf.sizes[k]
                         and (inf.iters[k] == "parallel" or domain.kinds[d] == "reduction")]
                cands.sort(key=lambda d: domain.kinds[d] != inf.iters[k])
                if cands:
                    got[k] = Aff.dim(cands[0])
                    used.add(cands[0])
                elif allow_growth and inf.iters[k] == "parallel":
                    domain = domain.copy() if domain is self.domain else domain
                    got[k] = Aff.dim(domain.add(inf.sizes[k], "parallel"))
                    # not added to `used`: a second new loop of this size lands on the same dim and
                    # the op is refused below (a diagonal). Giving it a dim of its own lets a small
                    # pointwise kernel (RoPE's cos/sin over (t, d)) grow into its (b, h, t, d) reader
                    # and take it from attention's prologue (Llama: one more kernel), so it stays so
                else:
                    return f"loop d{k} (size {inf.sizes[k]}, {inf.iters[k]}) has no place in the domain {self.domain.sizes}"
        loops = [g for g in got]  # type: ignore[misc]
        err = self._check_shape(inf, loops, domain, full_rows)
        if err:
            return err
        self._pending_domain = domain
        return loops

    def _unanchored(self, inf: OpInfo, got: list) -> str | None:
        """An op that shares no loop with the laid-out ops (it meets them only through 0-d or
        broadcast values: every parameter's update in an optimizer step reads the same step count)
        would be placed on domain dims by size alone, or grow the domain by its own: the kernel
        then runs the product of unrelated iteration spaces, each op recomputed across the
        others' dims. It joins only when its loops fill the domain exactly (same work), or when it
        reads no tensor from memory and fits the domain's dims (index math such as a reflect
        pad's indices: recomputing it is cheaper than a launch)."""
        if not self.anchored_only:
            return None
        own = Counter(s for s in inf.sizes if s != 1)  # sizes may be symbolic: counted, never ordered
        have = Counter(s for s in self.domain.sizes if s != 1)
        if not own or not have or any(g is not None and not g.is_const() for g in got):
            return None
        if own == have:
            return None
        reads = any(inf.used[i] and self.producer_of(v) is None and any(d != 1 for d in inf.shape(i))
                    for i, v in enumerate(inf.operands))
        fits = not (own - have)  # each of its loops finds a dim of its size
        if not reads and fits:
            return None
        return (f"shares no loop with the kernel's ops (its loops {list(own.elements())}, "
                f"the domain {list(have.elements())})")

    def _hint(self, inf: OpInfo, got: list) -> None:
        for i, v in enumerate(inf.operands):
            if not inf.used[i] or self.producer_of(v) is not None or not isinstance(v.type, ir.RankedTensorType):
                continue
            for a, use in [(a, u) for a in _aliases(v) for u in a.uses]:
                user = pat.op_of(use.owner)
                if user not in self.loops or user == inf.op:
                    continue
                uinf = self.info(user)
                if not uinf.used[use.operand_number]:
                    continue
                texprs = realign(self.operand_exprs(user, use.operand_number), _shape_of(a), inf.shape(i))
                used = {g.pure_dim() for g in got if g is not None} - {None}
                for j, e in enumerate(inf.maps[i].results):
                    if not isinstance(e, ir.AffineDimExpr) or got[e.position] is not None:
                        continue
                    d = texprs[j].pure_dim()
                    if (d is not None and d not in used and self.domain.sizes[d] == inf.sizes[e.position]
                            and (inf.iters[e.position] == "parallel" or self.domain.kinds[d] == "reduction")):
                        got[e.position] = Aff.dim(d)
                        used.add(d)

    def _check_shape(self, inf: OpInfo, loops: list[Aff], domain: Domain, full_rows: bool) -> str | None:
        pure = [l.pure_dim() for l in loops]
        seen = [d for d in pure if d is not None]
        if len(seen) != len(set(seen)):
            return "two loops on the same domain dim (a diagonal)"
        for k, (l, d) in enumerate(zip(loops, pure)):
            if d is not None and domain.sizes[d] != inf.sizes[k]:
                return f"loop d{k} size {inf.sizes[k]} != domain dim {d} size {domain.sizes[d]}"
        if inf.is_reduction:
            red = [k for k, it in enumerate(inf.iters) if it == "reduction" and inf.sizes[k] != 1]
            par = [k for k, it in enumerate(inf.iters) if it == "parallel" and inf.sizes[k] != 1]
            if any(pure[k] is None or domain.kinds[pure[k]] != "reduction" for k in red):
                return "reduction loops must be the domain's reduction dims"
            if sorted(pure[k] for k in red) != domain.reduction:
                return "reduction loops do not cover the domain's reduction dims"
            if any(pure[k] is None or domain.kinds[pure[k]] != "parallel" for k in par):
                return "parallel loops of a reduction must be the domain's parallel dims"
            if full_rows and sorted(pure[k] for k in par) != domain.parallel:
                return "a reduction over different rows"
        return None

    def check(self, op, loops: list[Aff]) -> str | None:
        """Every tensor `op` exchanges with laid-out ops sits at the same place on both sides."""
        inf = self.info(op)
        saved = self.loops.get(inf.op)
        self.loops[inf.op] = loops
        try:
            for i, v in enumerate(inf.operands):
                if not inf.used[i]:
                    continue
                prod = self.producer_of(v)
                if prod is None or prod[0] == inf.op:
                    continue
                pinf = self.info(prod[0])
                if not _tensor_exprs_equal(self.result_exprs(*prod), _shape_of(pinf.op.results[prod[1]]),
                                           self.operand_exprs(inf.op, i), inf.shape(i)):
                    return f"operand {i} is read at other positions than its producer computes"
            for user, i, r in self.consumers_of(inf.op):
                uinf = self.info(user)
                if user == inf.op or not uinf.used[i]:
                    continue
                if not _tensor_exprs_equal(self.result_exprs(inf.op, r), _shape_of(inf.op.results[r]),
                                           self.operand_exprs(user, i), uinf.shape(i)):
                    return f"result {r} is read by {user.name} at other positions than computed"
            return None
        finally:
            if saved is None:
                del self.loops[inf.op]
            else:
                self.loops[inf.op] = saved

    def try_add(self, op, allow_growth: bool = False, full_rows: bool = True) -> str | None:
        """Adds `op` if it fits; returns None on success, else the reason."""
        loops = self.derive(op, allow_growth, full_rows)
        if isinstance(loops, str):
            return loops
        domain = self._pending_domain
        old = self.domain
        if allow_growth and self._redundant(domain, op):
            return "the domain would grow past every op's own loops (ops sharing only a cheap producer)"
        self.domain = domain
        err = self.check(op, loops)
        if err:
            self.domain = old
            return err
        self.loops[pat.op_of(op)] = loops
        return None

    def _redundant(self, domain, op) -> bool:
        """Whether a grown domain has more points than any op's own loops: ops sharing only a cheap
        producer (an iota of the batch) but each with loops of its own (a pad's rows and columns,
        an interpolation's output length) made one kernel over the product of all of them: 75M
        iterations for 9k elements written. A broadcasting consumer grows the domain to its own
        loops, which this keeps."""
        if len(domain.sizes) <= len(self.domain.sizes):
            return False
        widest = 0
        for o in [*self.loops, pat.op_of(op)]:
            sizes = self.info(o).sizes
            if not all(isinstance(n, int) for n in sizes):
                return False
            widest = max(widest, math.prod(sizes))
        points = [domain.sizes[d] for d in range(len(domain.sizes))]
        return all(isinstance(n, int) for n in points) and math.prod(points) > widest

    # -- queries used by codegen ----------------------------------------------------------------------
    def storable(self, op, r: int) -> bool:
        """Result r's elements are each computed at exactly one domain point (modulo unused dims)."""
        inf = self.info(op)
        ex = self.result_exprs(op, r)
        shape = _shape_of(inf.op.results[r])
        seen = []
        for e, s in zip(ex, shape):
            if s == 1:
                continue
            d = e.pure_dim()
            if d is None or self.domain.sizes[d] != s:
                return False
            seen.append(d)
        return len(seen) == len(set(seen))


def solve(ops: list[ir.Operation], seed: ir.Operation | None = None, allow_growth: bool = True,
          views: list | None = None) -> Layout:
    """Lays out all `ops` (the generics of one kernel) over one domain, seeded by `seed`
    (default: the first reduction, else the op with the most non-unit loops). Ops are placed
    once they exchange a tensor with a placed op (then, failing that, by hints and sizes); raises
    ValueError naming an op that fits nowhere."""
    ops = [pat.op_of(o) for o in ops]
    lay = Layout()
    lay.views = set(pat.op_of(v) for v in views or ())
    if not ops:
        return lay
    if seed is None:
        reds = [o for o in ops if lay.info(o).is_reduction]
        seed = reds[0] if reds else max(ops, key=lambda o: (sum(1 for s in lay.info(o).sizes if s != 1), -ops.index(o)))
    seed = pat.op_of(seed)
    lay.seed(seed)
    grow = allow_growth and not lay.info(seed).is_reduction
    pending = [o for o in ops if o != seed]
    connected_only = True
    last_err = ""
    while pending:
        progress = False
        for o in list(pending):
            if connected_only and not (any(lay.producer_of(v) is not None for v in o.operands) or lay.consumers_of(o)):
                continue
            err = lay.try_add(o, allow_growth=grow)
            if err:
                last_err = f"{o.name} at {o.location}: {err}"
                continue
            pending.remove(o)
            progress = True
        if progress:
            connected_only = True
        elif connected_only:
            connected_only = False
        else:
            raise ValueError(last_err)
    return lay
