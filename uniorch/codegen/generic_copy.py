"""Copy kernels (`tensor.pad` / `tensor.concat` / `tensor.insert_slice`): one lane per written
element, plus in-place marking and kernel parameters shared with the loop-nest emitter."""
from __future__ import annotations

from torch_mlir import ir

from uniorch.ir import dims
from uniorch.ir.dims import code as size_code

from . import body as B
from . import patterns as pat
from .generic_kernel import Kernel, _numel, _shape, _short_loc
from .source import CodegenError


def _known_type(t) -> bool:
    try:
        B.type_name(t)
        return True
    except KeyError:
        return False


# =================================================================================================
# copy kernels
# =================================================================================================
def _slice(op) -> tuple[list, list, list]:
    """An insert_slice's offsets, sizes and strides, symbolic entries as expressions over the size
    symbols (uniorch/ir/dims.py: the gradient of `logits[:, :-1]` at a symbolic length)."""
    try:
        parts = dims.slice_operands(op)
    except dims.UnknownSize as err:
        raise CodegenError(op, f"insert_slice bounds: {err}") from None
    return parts["offsets"], parts["all_sizes"], parts["strides"]


def _copy_space(k: Kernel) -> tuple[str, list[int]]:
    """(mode, iteration shape) of a copy kernel."""
    op = k.copy_ops[0]
    if op.name == "tensor.insert_slice" and (_inplace_input(k) is not None or _dest_is_empty(op)):
        return "slice", _slice(op)[1]
    return "full", _shape(op.results[0])


def _copy_numel(k: Kernel) -> int:
    return _numel(_copy_space(k)[1])


def _dest_is_empty(op) -> bool:
    dest = op.operands[1]
    return not isinstance(dest.owner, ir.Block) and pat.op_of(dest.owner).name == "tensor.empty"


def _inplace_input(k: Kernel) -> int | None:
    attrs = k.func.attributes
    if "uniorch.inplace" not in attrs:
        return None
    pairs = [ir.IntegerAttr(a).value for a in ir.ArrayAttr(attrs["uniorch.inplace"])]
    return pairs[0] if pairs and pairs[0] >= 0 else None


def _mark_inplace(k: Kernel) -> None:
    op = k.copy_ops[0]
    if op.name != "tensor.insert_slice" or "uniorch.inplace" in k.func.attributes:
        return
    dest = op.operands[1]
    if isinstance(dest.owner, ir.Block) and dest.owner == k.block and len(k.ret.operands) == 1 \
            and k.ret.operands[0] == op.results[0]:
        idx = k.args.index(dest)
        with k.func.context:
            k.func.attributes["uniorch.inplace"] = ir.ArrayAttr.get(
                [ir.IntegerAttr.get(ir.IntegerType.get_signless(64), idx)])


def _params(k: Kernel) -> list[str]:
    params = []
    for prefix, vals in (("in", k.args), ("out", list(k.ret.operands))):
        for i, v in enumerate(vals):
            params.append(f"{prefix}{i}_ptr")
            params.extend(f"{prefix}{i}_s{d}" for d in range(len(_shape(v.type))))
    return params + k.symbols


def _emit_copy(k: Kernel, sched: dict) -> tuple[str, list[str]]:
    op = k.copy_ops[0]
    if len(k.ret.operands) != 1 or k.ret.operands[0] != op.results[0]:
        raise CodegenError(op, "a copy kernel returns its op's result")
    arg_index = {a: i for i, a in enumerate(k.args)}
    mode, space = _copy_space(k)
    n = _numel(space)
    idx64 = k.symbolic or max([n] + [_numel(_shape(a.type)) for a in k.args]
                               + [_numel(_shape(op.results[0].type))]) >= 2 ** 31
    L = []
    emit = L.append
    ind = "    "
    emit(f"{ind}# {op.name} at {_short_loc(op)}")
    for i, a in enumerate(k.args):
        emit(f"{ind}# in{i}: {pat.value_name(a)} : {a.type}")
    emit(f"{ind}pid = {'tl.program_id(0).to(tl.int64)' if idx64 else 'tl.program_id(0)'}")
    emit(f"{ind}offs = pid * BLOCK + tl.arange(0, BLOCK)")
    emit(f"{ind}mask = offs < {size_code(n)}")
    names = [f"i{j}" for j in range(len(space))]
    stride = 1
    strides = []
    for s in reversed(space):
        strides.append(stride)
        stride *= s
    strides.reverse()
    for j, (nm, s, st) in enumerate(zip(names, space, strides)):
        text = "offs" if st == 1 else f"offs // {size_code(st)}"
        if j > 0:
            text = f"({text}) % {size_code(s)}"
        emit(f"{ind}{nm} = {text}")
    out_shape = _shape(op.results[0])

    def arg_of(v):
        if not isinstance(v.owner, ir.Block) or v.owner != k.block:
            raise CodegenError(op, "copy operands must be kernel inputs")
        return arg_index[v]

    def addr(prefix: str, idxs: list[str], shape: list[int]) -> str:
        terms = [f"({x}) * {prefix}_s{j}" for j, (x, s) in enumerate(zip(idxs, shape)) if s != 1]
        return f"{prefix}_ptr" + "".join(" + " + t for t in terms) + (" + offs * 0" if not terms else "")

    if op.name == "tensor.pad":
        src = op.operands[0]
        try:
            low = dims.pad_amounts(op)["low"]
        except dims.UnknownSize as err:
            raise CodegenError(op, f"padding amounts: {err}") from None
        sshape = _shape(src)
        yv = [o.operation for o in op.regions[0].blocks[0].operations][-1].operands[0]
        owner = yv.owner
        if isinstance(owner, ir.Block) or pat.op_of(owner).name != "arith.constant":
            raise CodegenError(op, "padding value is not a constant")
        owner = pat.op_of(owner)
        ty = B.elem_name(owner.results[0].type)
        attr = owner.attributes["value"]
        value = ir.FloatAttr(attr).value if ty in B.FLOATS else ir.IntegerAttr(attr).value
        a = arg_of(src)
        sidx, conds = [], []
        for j, (nm, lo, s) in enumerate(zip(names, low, sshape)):
            e = f"{nm} - ({size_code(lo)})" if lo != 0 else nm
            sidx.append(e)
            if lo != 0 or not dims.same(s, out_shape[j]):
                conds.append(f"({e} >= 0) & ({e} < {size_code(s)})")
        inside = " & ".join(conds) or "mask"
        emit(f"{ind}inside = {inside}")
        emit(f"{ind}v = tl.load({addr(f'in{a}', sidx, sshape)}, mask=mask & inside, other=0)")
        emit(f"{ind}v = tl.where(inside, v, {B.constant_expr(value, ty)})")
        emit(f"{ind}tl.store({addr('out0', names, out_shape)}, v, mask=mask)")
    elif op.name == "tensor.concat":
        dim = ir.IntegerAttr(op.attributes["dim"]).value
        start = 0
        first = True
        for v in op.operands:
            a = arg_of(v)
            shp = _shape(v)
            end = dims.prod([start + shp[dim]])
            sidx = list(names)
            sidx[dim] = f"{names[dim]} - {size_code(start)}" if start != 0 else names[dim]
            emit(f"{ind}piece = ({names[dim]} >= {size_code(start)}) & ({names[dim]} < {size_code(end)})  # in{a}")
            load = f"tl.load({addr(f'in{a}', sidx, shp)}, mask=mask & piece, other=0)"
            emit(f"{ind}v = {load}" if first else f"{ind}v = tl.where(piece, {load}, v)")
            first = False
            start = end
        emit(f"{ind}tl.store({addr('out0', names, out_shape)}, v, mask=mask)")
    else:  # insert_slice
        src, dest = op.operands[0], op.operands[1]
        offsets, sizes, steps = _slice(op)
        if not all(isinstance(st, int) for st in steps):
            raise CodegenError(op, "insert_slice with symbolic strides")
        sshape = _shape(src)
        # source dim of each destination dim (a rank-reducing insert drops unit dims of `sizes`)
        # (same rank: the sizes are the source's dims, whatever symbols each is written in)
        src_dim: list[int | None] = list(range(len(sizes))) if len(sshape) == len(sizes) else []
        q = len(sshape) if src_dim else 0
        for sz in sizes if not src_dim else ():
            if q < len(sshape) and dims.same(sshape[q], sz) and sz != 1:
                src_dim.append(q)
                q += 1
            elif sz == 1:
                src_dim.append(None)
            else:
                raise CodegenError(op, "unsupported rank-reducing insert_slice")
        if q != len(sshape):
            raise CodegenError(op, "unsupported rank-reducing insert_slice")
        a = arg_of(src)

        def src_addr(rel: list[str]) -> str:
            terms = [f"({rel[j]}) * in{a}_s{sd}" for j, sd in enumerate(src_dim) if sd is not None and sshape[sd] != 1]
            return f"in{a}_ptr" + "".join(" + " + t for t in terms) + (" + offs * 0" if not terms else "")

        if mode == "slice":  # iterate the slice, write into the destination buffer
            didx = [(f"{nm} * {st}" if st != 1 else nm) + (f" + ({size_code(off)})" if off != 0 else "")
                    for nm, off, st in zip(names, offsets, steps)]
            emit(f"{ind}v = tl.load({src_addr(names)}, mask=mask, other=0)")
            emit(f"{ind}tl.store({addr('out0', didx, out_shape)}, v, mask=mask)  # into the destination's slice")
        else:  # iterate the destination: slice elements from the source, the rest copied
            d = arg_of(dest)
            conds, rel = [], []
            for nm, off, sz, st in zip(names, offsets, sizes, steps):
                r = f"({nm} - ({size_code(off)}))" if off != 0 else nm
                c = f"({r} >= 0) & ({r} < {size_code(dims.prod([(sz - 1) * st + 1]))})"
                if st != 1:
                    c += f" & ({r} % {st} == 0)"
                    r = f"({r} // {st})"
                conds.append(c)
                rel.append(r)
            emit(f"{ind}inside = {' & '.join(conds) or 'mask'}")
            emit(f"{ind}v = tl.load({src_addr(rel)}, mask=mask & inside, other=0)")
            emit(f"{ind}old = tl.load({addr(f'in{d}', names, _shape(dest))}, mask=mask & (~inside), other=0)")
            emit(f"{ind}tl.store({addr('out0', names, out_shape)}, tl.where(inside, v, old), mask=mask)")
    return "\n".join(L), ["BLOCK"]
