"""Small helpers over MLIR's Python bindings shared by uniorch's passes."""
from __future__ import annotations

from torch_mlir import ir

from uniorch.errors import LoweringError


def producer(v: ir.Value):
    """The op defining `v`, or None for a block argument."""
    return None if isinstance(v.owner, ir.Block) else getattr(v.owner, "operation", v.owner)


def reassociation_groups(op: ir.Operation) -> list[list[int]]:
    """A tensor.expand_shape's or collapse_shape's reassociation as lists of dims."""
    return [[ir.IntegerAttr(i).value for i in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes["reassociation"])]


def reassociation_attr(groups: list[list[int]]) -> ir.ArrayAttr:
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, d) for d in g]) for g in groups])


def contiguous_strides(shape) -> list[int]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return out[::-1]


def split_strides(groups: list[list[int]], strides: list[int], shape) -> list[int]:
    """Strides after dim j of a tensor with `strides` splits into the dims `groups[j]` of `shape`
    (a view always)."""
    out = [0] * len(shape)
    for grp, inner in zip(groups, strides):
        for d in reversed(grp):
            out[d] = inner
            inner *= shape[d]
    return out


def merge_strides(groups: list[list[int]], strides: list[int], shape) -> list[int] | None:
    """Strides after the dims `groups[j]` of a tensor of `shape` and `strides` merge into dim j;
    None where they do not step over each other (torch's reshape would copy)."""
    out = []
    for grp in groups:
        kept = [d for d in grp if shape[d] != 1]
        if any(strides[a] != strides[b] * shape[b] for a, b in zip(kept, kept[1:])):
            return None
        out.append(strides[kept[-1]] if kept else 1)
    return out


def iterator_types_attr(kinds) -> ir.Attribute:
    """A linalg.generic's `iterator_types` for `kinds` ("parallel" / "reduction", in loop order)."""
    return ir.Attribute.parse("[" + ", ".join(f"#linalg.iterator_type<{k}>" for k in kinds) + "]")


def main_func(module: ir.Module):
    for op in module.body.operations:
        op = op.operation  # block iteration yields OpViews, and FuncOp's `.name` is its symbol
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            return op
    raise LoweringError("the module has no func.func @main")


def topological_sort(block: ir.Block) -> None:
    """Reorders a block's ops so every value is defined before use, keeping the order otherwise.

    Outlining places each kernel call where its group's last op was; an op that used an earlier
    member's result may now sit before the call, and moves after it.
    """
    ops = [o.operation for o in block.operations]
    terminator = ops.pop()
    index = {op: i for i, op in enumerate(ops)}
    deps = {op: set() for op in ops}
    for op in ops:
        for inner in nested_ops(op):
            for v in inner.operands:
                owner = v.owner
                if isinstance(owner, ir.Block):
                    continue
                top = owner
                while top.parent is not None and top not in index and top.parent.name != "func.func":
                    top = top.parent
                if top in index and top != op:
                    deps[op].add(top)
    placed, order, visiting = set(), [], set()
    for root in ops:  # depth-first, iterative: graphs of thousands of ops exceed Python's recursion
        stack = [(root, False)]
        while stack:
            op, expanded = stack.pop()
            if op in placed:
                continue
            if expanded:
                visiting.discard(op)
                placed.add(op)
                order.append(op)
                continue
            if op in visiting:
                raise LoweringError("outlining created a dependency cycle between kernels")
            visiting.add(op)
            stack.append((op, True))
            for d in sorted(deps[op], key=index.__getitem__, reverse=True):
                if d not in placed:
                    stack.append((d, False))
    for op in order:
        op.move_before(terminator)


def nested_ops(op: ir.Operation) -> list:
    """`op` and every op nested in its regions, outermost first."""
    out = []

    def visit(o):
        out.append(o.operation)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return out


PURE_GLUE = ("arith.constant", "tensor.empty", "tensor.expand_shape", "tensor.collapse_shape", "tensor.extract_slice")


def erase_dead_pure_ops(block: ir.Block) -> None:
    """Drops constants, shapes and views nothing uses any more (outlining leaves them behind)."""
    changed = True
    while changed:
        changed = False
        for op in reversed(list(block.operations)):
            op = op.operation
            if op.name in PURE_GLUE and all(len(list(r.uses)) == 0 for r in op.results):
                op.erase()
                changed = True


def size_as_index(size, func_op: ir.Operation) -> ir.Value:
    """A loop size (an int, or an expression over the size symbols: uniorch/ir/dims.py) as an
    `index` value at the insertion point, built from `tensor.dim`s of the function's arguments:
    they precede every kernel, so a value sized by it never depends on a kernel that reads it."""
    import sympy
    from torch_mlir.dialects import arith, tensor

    from uniorch.ir import dims

    index = ir.IndexType.get()

    def const(n: int) -> ir.Value:
        return arith.ConstantOp(index, int(n)).result

    if isinstance(size, int) or (isinstance(size, sympy.Expr) and size.is_Integer):
        return const(int(size))
    args = func_op.regions[0].blocks[0].arguments
    for arg in args:
        if isinstance(arg.type, ir.RankedTensorType):
            try:
                shape = dims.shape(arg)
            except dims.UnknownSize:
                continue
            for j, s in enumerate(shape):
                if not isinstance(s, int) and sympy.simplify(s - size) == 0:
                    return tensor.DimOp(arg, const(j)).result
    if isinstance(size, sympy.Add):
        terms = [size_as_index(t, func_op) for t in size.args]
        total = terms[0]
        for t in terms[1:]:
            total = arith.AddIOp(total, t).result
        return total
    if isinstance(size, sympy.Mul) and len(size.args) == 2 and size.args[0].is_Integer:
        return arith.MulIOp(const(int(size.args[0])), size_as_index(size.args[1], func_op)).result
    raise LoweringError(f"no function argument gives the size {size}")


def build_generic(ins: list, outs: list, maps: list, its: list, body, attrs: dict | None = None):
    """A linalg.generic; `body(block args) -> yielded values`, built inside its block."""
    types = [o.type for o in outs]
    op = ir.Operation.create(
        "linalg.generic", results=types, operands=list(ins) + list(outs),
        attributes={"indexing_maps": ir.ArrayAttr.get([ir.AffineMapAttr.get(m) for m in maps]),
                    "iterator_types": iterator_types_attr(its),
                    "operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(ins), len(outs)]), **(attrs or {})},
        regions=1)
    elems = [ir.ShapedType(v.type).element_type if isinstance(v.type, ir.ShapedType) else v.type
             for v in list(ins) + list(outs)]
    blk = op.regions[0].blocks.append(*elems, arg_locs=[ir.Location.unknown()] * len(elems))
    with ir.InsertionPoint(blk):
        ir.Operation.create("linalg.yield", operands=body(list(blk.arguments)))
    return op


def clone_body(ops: list, arg, v=None) -> list:
    """`ops` (a body's, reading block argument `arg`) cloned at the insertion point reading `v`
    instead: the (original value, clone's value) pairs, `arg`'s first. `arg` may instead be a list
    of such (block argument, value) pairs, for a body over several inputs."""
    mapping = list(arg) if isinstance(arg, list) else [(arg, v)]
    for o in ops:
        c = _op_of(o.clone())
        for i, w in enumerate(c.operands):
            c.operands[i] = mapped(mapping, w)
        mapping += list(zip(o.results, c.results))
    return mapping


def mapped(mapping: list, v: ir.Value) -> ir.Value:
    return next((new for old, new in mapping if old == v), v)


def _op_of(o):
    return o.operation if hasattr(o, "operation") else o
