"""A scatter's updates and indices computed in its kernel: the pointwise `linalg.generic`s
passes/fuse_scatter.py puts in the scatter's group (an embedding bag's gathered rows times their
mask, a graph network's gathered messages, torch-mlir's flattened updates and assembled
coordinates) are evaluated per update element, where the kernel would otherwise load the element
from memory.

A generic's loops are the operand's non-unit dims in order (the views between them only add or
drop unit dims, and its result map is the identity). Its operands are kernel arguments read
through their indexing maps, or generics in the kernel evaluated at that element; `tensor.extract`
in its body gathers from a kernel argument, or evaluates a generic in the kernel at the gathered
position, out of bounds reading 0 as in the other kernels.
"""
from __future__ import annotations

from torch_mlir import ir

from . import body as B
from . import patterns as pat
from .domain import VIEW_OPS
from .generic_copy import _known_type
from .source import CodegenError



def computed_operand(scatter: ir.Operation, k: int) -> tuple[ir.Operation | None, int, list[ir.Operation]]:
    """(the generic computing the scatter's operand k, which of its results, the views after it),
    or (None, 0, []) when the operand is read from memory (updates k=0, indices k=1)."""
    v, views = scatter.operands[k], []
    while not isinstance(v.owner, ir.Block) and pat.op_of(v.owner).name in VIEW_OPS:
        views.append(pat.op_of(v.owner))
        v = views[-1].operands[0]
    if isinstance(v.owner, ir.Block):
        if views:
            raise CodegenError(scatter, "a scatter operand read through a view of a kernel argument")
        return None, 0, []
    g = pat.op_of(v.owner)
    if not pat.is_generic(g) or not pat.is_pointwise(g):
        raise CodegenError(g, "a scatter's updates and indices come from pointwise generics only")
    return g, list(g.results).index(v), views


def in_kernel(gens: list[ir.Operation]) -> list[ir.Operation]:
    """`gens` and the generics in the kernel they read, through operands or gathers."""
    out: list = []
    work = [g for g in gens if g is not None]
    while work:
        g = work.pop()
        if any(g == x for x in out):
            continue
        out.append(g)
        for v in list(pat.inputs(g)) + pat.captured_values(g):
            if not isinstance(v.owner, ir.Block) and pat.is_generic(pat.op_of(v.owner)):
                work.append(pat.op_of(v.owner))
    return out


def loops_at(g: ir.Operation, shape: list[int], coords: list[str]) -> list[str]:
    """Generic `g`'s loop indices for the element at `coords` of its result viewed as `shape`
    (the views between only add or drop unit dims)."""
    sizes = pat.loop_sizes(g)
    if [n for n in sizes if n != 1] != [n for n in shape if n != 1]:
        raise CodegenError(g, "a scatter operand's view changes more than unit dims")
    it = iter(c for c, n in zip(coords, shape) if n != 1)
    return [f"({next(it)}).to(tl.int64)" if n != 1 else "tl.full([], 0, tl.int64)" for n in sizes]


def _shape(v: ir.Value) -> list[int]:
    return list(ir.RankedTensorType(v.type).shape)


def _sizes(v: ir.Value) -> list[str]:
    """A tensor's sizes as kernel code: ints, or expressions over the kernel's size parameters
    (the raw type's `?` is a negative marker, and a bound by it masked every lane off)."""
    from uniorch.ir import dims

    if ir.RankedTensorType(v.type).has_static_shape:
        return [str(n) for n in _shape(v)]
    try:
        return [dims.code(n) for n in dims.shape(v)]
    except dims.UnknownSize as err:
        raise CodegenError(pat.op_of(v.owner) if not isinstance(v.owner, ir.Block) else None,
                           f"a gather from a tensor of unknown size: {err}") from err


class UpdateEmitter:
    """Triton lines computing generic `g`'s element at the update coordinates `ucoord`."""

    def __init__(self, g: ir.Operation, args: list[ir.Value], lines: list[str], mask: str, prefix: str = ""):
        self.g, self.lines, self.mask, self.prefix = g, lines, mask, prefix
        self.arg_index = {a: i for i, a in enumerate(args)}
        self.n = 0

    def fresh(self, p: str) -> str:
        self.n += 1
        return f"{self.prefix}{p}{self.n}"

    def value(self, ucoord_loops: list[str], r: int = 0) -> tuple[str, str]:
        """(the text of result `r`'s element at these loop indices, its element type)."""
        g = self.g
        out_map = pat.indexing_maps(g)[pat.num_inputs(g) + r]
        if not pat.is_identity_map(out_map):
            raise CodegenError(g, "the updates' generic does not write its loops in order")
        self.idx = ucoord_loops
        blk = pat.body(g)
        n_in = pat.num_inputs(g)
        self.env: dict = {}
        for i, a in enumerate(list(blk.arguments)[:n_in]):
            self.env[a] = ("operand", i)
        y = pat.yield_op(g)
        return self.get(y.operands[r])

    def get(self, v: ir.Value) -> tuple[str, str]:
        got = self.env.get(v)
        if isinstance(got, tuple) and got[0] == "operand":
            got = self.env[v] = self.operand(got[1])
        if got is not None:
            return got
        if isinstance(v.owner, ir.Block):
            if isinstance(v.type, ir.IndexType):  # a symbolic size (`i % n`): the kernel's size parameters
                from uniorch.ir import dims

                try:
                    return dims.code(dims.index_value(v)), "index"
                except dims.UnknownSize:
                    pass
            raise CodegenError(self.g, "a block argument the updates' body cannot read")
        op = pat.op_of(v.owner)
        self.env[v] = self.op(op)
        return self.env[v]

    def operand(self, i: int) -> tuple[str, str]:
        v = pat.inputs(self.g)[i]
        if not isinstance(v.type, ir.ShapedType):
            if isinstance(v.owner, ir.Block) or pat.op_of(v.owner).name != "arith.constant":
                raise CodegenError(self.g, "a scalar operand that is not a constant")
            return self.constant(pat.op_of(v.owner))
        a = self.arg_index.get(v)
        m = pat.indexing_maps(self.g)[i]
        if a is None:
            return self.computed(v, m)
        terms = [f"({B.affine_code(e, self.idx, [])}) * in{a}_s{j}"
                 for j, (e, n) in enumerate(zip(m.results, _shape(v))) if n != 1]
        var = self.fresh("x")
        terms = terms or ["lin * 0"]  # a 0-d operand: every lane loads its one element
        self.lines.append(f"    {var} = tl.load(in{a}_ptr{''.join(' + ' + t for t in terms)}, mask={self.mask}, other=0)")
        return var, B.elem_name(v.type)

    def computed(self, v: ir.Value, m: ir.AffineMap) -> tuple[str, str]:
        """An operand a pointwise generic in the kernel computes (fusion took it along): its body
        at the element this generic reads."""
        q = None if isinstance(v.owner, ir.Block) else pat.op_of(v.owner)
        if q is None or not pat.is_generic(q) or not pat.is_pointwise(q):
            raise CodegenError(self.g, "the updates' generic reads a value computed in the kernel")
        return self.evaluate(q, list(q.results).index(v), [B.affine_code(e, self.idx, []) for e in m.results],
                             self.mask)

    def evaluate(self, q: ir.Operation, r: int, loops: list[str], mask: str) -> tuple[str, str]:
        sub = UpdateEmitter(q, [], self.lines, mask, self.prefix)
        sub.arg_index, sub.n = self.arg_index, self.n
        got = sub.value(loops, r)
        self.n = sub.n
        return got

    def constant(self, op: ir.Operation) -> tuple[str, str]:
        attr = op.attributes["value"]
        ty = B.type_name(op.results[0].type)
        if ty in B.FLOATS:
            return B.constant_expr(ir.FloatAttr(attr).value, ty), ty
        return B.constant_expr(ir.IntegerAttr(attr).value, ty), ty

    def op(self, op: ir.Operation) -> tuple[str, str]:
        name = op.name
        if name == "arith.constant":
            return self.constant(op)
        if name == "linalg.index":
            return f"{self.idx[ir.IntegerAttr(op.attributes['dim']).value]}", "index"
        if name == "tensor.extract":
            return self.gather(op)
        if len(op.results) != 1 or len(op.regions) or not _known_type(op.results[0].type):
            raise CodegenError(op, "unsupported op in a scatter's updates")
        args = [self.get(x) for x in op.operands]
        rty = B.type_name(op.results[0].type)
        expr = B.expression(op, [a for a, _ in args], [t for _, t in args], rty)
        var = self.fresh("t")
        self.lines.append(f"    {var} = {expr}  # {name}")
        return var, rty

    def gather(self, op: ir.Operation) -> tuple[str, str]:
        src = op.operands[0]
        a = self.arg_index.get(src)
        conds, terms, codes = [], [], []
        for j, (x, n) in enumerate(zip(list(op.operands)[1:], _sizes(src))):
            code, _ = self.get(x)
            codes.append(code)
            conds.append(f"({code} >= 0) & ({code} < {n})")
            terms.append(f"{code} * in{a}_s{j}")
        if a is None:  # from a generic in the kernel: its element there, computed (out of bounds: 0)
            q = None if isinstance(src.owner, ir.Block) else pat.op_of(src.owner)
            if q is None or not pat.is_generic(q) or not pat.is_pointwise(q):
                raise CodegenError(op, "gathers only from kernel inputs and pointwise generics")
            inside = self.fresh("inb")
            self.lines.append(f"    {inside} = {' & '.join([self.mask] + conds)}")
            code, ty = self.evaluate(q, list(q.results).index(src), codes, inside)
            var = self.fresh("gather")
            self.lines.append(f"    {var} = tl.where({inside}, {code}, 0)  # tensor.extract of a computed value")
            return var, ty
        var = self.fresh("gather")
        terms.append("lin * 0")  # indices that are constants or scalars: still one lane each
        mask = " & ".join([self.mask] + conds)
        self.lines.append(f"    {var} = tl.load(in{a}_ptr{''.join(' + ' + t for t in terms)}, mask={mask}, other=0)"
                          "  # tensor.extract, out of bounds -> 0")
        return var, B.elem_name(src.type)
