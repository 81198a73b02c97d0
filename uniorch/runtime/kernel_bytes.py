"""Bytes a kernel moves: its tensor arguments read and its results written, each stored tensor
counted once per kernel.

A kernel can read one tensor through several arguments: rotate_half's two halves of q next to q
itself, slices the caller takes as views (`tensor.extract_slice` in the main function, no copy).
Those arguments cover parts of one buffer, and the kernel's loads of them touch the same memory
(the same rows, in the same program), so they count as the union of the parts, as Inductor counts
a buffer once per kernel however many loads read it. Symbolic sizes (uniorch/ir/dims.py) count at
the capture's sizes, each argument on its own.

An argument the kernel only gathers from (every use a `tensor.extract` in a generic's body: an
embedding table, a rotary cache indexed by positions) counts the elements those loops can load,
at most the whole argument: a gather of 16 token rows reads 16 rows, not the 50257-row table.
That is Inductor's rule too (`get_read_write_buffer_accesses`: per buffer, the smaller of the
elements its loops access and its size), for the worst case of distinct indices.
"""
from __future__ import annotations

from itertools import product

from torch_mlir import ir

from uniorch.ir import dims

_VIEWS = ("tensor.extract_slice", "tensor.expand_shape", "tensor.collapse_shape")


def _nbytes(t) -> int:
    from uniorch.passes.plan_memory import nbytes

    return nbytes(t)


def relayout_bytes(func, relayout) -> int:
    """Bytes of the inputs the launch plan copies to another layout before kernel `func`
    (KernelSource.relayout; read once and written once each), at static sizes (0 for symbolic).
    As the plan does (runtime/plan.py), a contiguous input whose wanted innermost dim already has
    stride 1 is not copied: a 1x1 convolution's filters, [out, in, 1, 1], are channels-last too."""
    args = func.regions[0].blocks[0].arguments
    total = 0
    for i, order in relayout:
        shape = ir.RankedTensorType(args[i].type).shape
        if any(d < 0 for d in shape) or all(n == 1 for n in shape[order[-1] + 1:]) \
                or dims.prod(list(shape)) <= 1:
            continue
        total += _nbytes(args[i].type)
    return total


def kernel_bytes(func, calls=()) -> tuple[int, int]:
    """(read, written) for kernel `func`, called by the `func.call` ops `calls` (their operands say
    which arguments are views of one buffer; without them each argument counts in full)."""
    if dims.has_symbols(func):
        return _symbolic(func)
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    written = sum(_nbytes(t) for t in ftype.results)
    caps = gathered(func)
    reads = [_read_bytes(list(c.operands), caps) for c in calls]
    if not reads:
        reads = [sum(_capped(t, caps.get(i)) for i, t in enumerate(ftype.inputs))]
    return max(reads), written


def gathered(func) -> dict[int, int]:
    """{argument: elements the kernel can load of it} for the arguments it only gathers from:
    each use a `tensor.extract` in the body of a generic at the kernel's top level, loading one
    element per iteration of that generic's loops."""
    from uniorch.codegen.patterns import loop_sizes

    caps = {}
    for i, arg in enumerate(func.regions[0].blocks[0].arguments):
        n = 0
        for use in arg.uses:
            op = use.owner
            g = op.parent if op.name == "tensor.extract" and use.operand_number == 0 else None
            if g is None or g.name != "linalg.generic" or g.parent.name != "func.func":
                break
            try:
                sizes = loop_sizes(g)
            except ValueError:
                break
            if not all(isinstance(s, int) for s in sizes):
                break
            n += dims.prod(sizes)
        else:
            if n:
                caps[i] = n
    return caps


def _capped(t, elements: int | None) -> int:
    full = _nbytes(t)
    if elements is None:
        return full
    return min(full, elements * full // max(1, dims.prod(list(ir.RankedTensorType(t).shape))))


def _symbolic(func) -> tuple[int, int]:
    hints = dims.hints(func)
    block = func.regions[0].blocks[0]

    def size(v) -> int:
        et = ir.RankedTensorType(v.type).element_type
        width = max(1, (et.width + 7) // 8) if hasattr(et, "width") else 8
        return width * dims.hinted(dims.prod(dims.shape(v)), hints)

    ret = list(block.operations)[-1]
    return (sum(size(a) for a in block.arguments if isinstance(a.type, ir.RankedTensorType)),
            sum(size(r) for r in ret.operands))


def _read_bytes(operands, caps=None) -> int:
    by_base: list[tuple[object, list]] = []
    total = 0
    for i, v in enumerate(operands):
        if not isinstance(v.type, ir.RankedTensorType):
            continue
        if caps and i in caps:  # gathered from: its loads, wherever the buffer starts
            total += _capped(v.type, caps[i])
            continue
        found = _box(v)
        if found is None:
            total += _nbytes(v.type)
            continue
        base, box = found
        for b, boxes in by_base:
            if b == base:
                boxes.append(box)
                break
        else:
            by_base.append((base, [box]))
    for base, boxes in by_base:
        t = ir.RankedTensorType(base.type)
        total += _covered(boxes) * _nbytes(t) // max(1, dims.prod(list(t.shape)))
    return total


def _box(v):
    """(base, [(lo, hi) per dim of base]): the part of a stored value that v is, through static
    unit-stride slices and through reshapes that split or merge whole dims; None where v's shape
    is symbolic."""
    t = ir.RankedTensorType(v.type)
    if not t.has_static_shape:
        return None
    return _down(v, [(0, n) for n in t.shape])


def _down(v, box):
    """The box `box` of v, as a box of the value v views."""
    op = None if isinstance(v.owner, ir.Block) else v.owner.operation
    if op is None or op.name not in _VIEWS or not ir.RankedTensorType(op.operands[0].type).has_static_shape:
        return v, box
    src = op.operands[0]
    shape = list(ir.RankedTensorType(src.type).shape)
    if op.name == "tensor.extract_slice":
        offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
        strides = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))
        if len(op.operands) != 1 or len(offsets) != len(box) or any(s != 1 for s in strides) or any(o < 0 for o in offsets):
            return v, box  # rank-reducing, strided or at symbolic offsets: counted on its own
        return _down(src, [(lo + o, hi + o) for (lo, hi), o in zip(box, offsets)])
    groups = [[ir.IntegerAttr(i).value for i in ir.ArrayAttr(g)] for g in ir.ArrayAttr(op.attributes["reassociation"])]
    out = list(ir.RankedTensorType(v.type).shape)
    if op.name == "tensor.expand_shape":  # source dim j is v's dims g: whole, or g is one dim
        if any(len(g) > 1 and any(box[i] != (0, out[i]) for i in g) for g in groups):
            return v, box
        return _down(src, [box[g[0]] if len(g) == 1 else (0, shape[j]) for j, g in enumerate(groups)])
    # collapse: v's dim j is source dims g
    if any(len(g) > 1 and box[j] != (0, out[j]) for j, g in enumerate(groups)):
        return v, box
    return _down(src, [b for j, g in enumerate(groups) for b in ([box[j]] if len(g) == 1 else [(0, shape[i]) for i in g])])


def _covered(boxes) -> int:
    """Elements in the union of boxes (coordinate compression: a handful of boxes per kernel)."""
    if len(boxes) == 1:
        return dims.prod([hi - lo for lo, hi in boxes[0]])
    cuts = [sorted({c for box in boxes for c in box[d]}) for d in range(len(boxes[0]))]
    cells = [list(zip(c, c[1:])) for c in cuts]
    n = 0
    for cell in product(*cells):
        if any(all(lo <= a and b <= hi for (a, b), (lo, hi) in zip(cell, box)) for box in boxes):
            n += dims.prod([b - a for a, b in cell])
    return n
