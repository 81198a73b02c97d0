"""Bodies for the functions of Ascend's compiler runtime that the adapter's linalg calls instead of
lowering an op itself: `tl.cumsum` / `tl.cumprod` (`@triton_cumsum_N`) and `tl.gather`
(`@triton_gather_N`). bishengir-compile links its own; the cpu lowering defines each here, for
the forms uniorch's kernels call, before inlining and bufferizing. A call in any other form keeps
its declaration, and `lowering.to_llvm` names it (the kernel falls back to the interpreter)."""
from __future__ import annotations

import re

# scans: `(tensor, axis: i32, reverse: i1) -> tensor`, with their combining op by element kind
_SCANS = {"cumsum": ("arith.addi", "arith.addf"), "cumprod": ("arith.muli", "arith.mulf")}


def define(module, funcs: list, calls: list) -> None:
    """Give every declared runtime function of `module` this form defines a body; `funcs`, `calls`:
    the module's func.func and func.call ops."""
    from torch_mlir import ir

    by_callee: dict[str, list] = {}
    for call in calls:
        by_callee.setdefault(ir.FlatSymbolRefAttr(call.attributes["callee"]).value, []).append(call)
    for decl in funcs:
        name = ir.StringAttr(decl.attributes["sym_name"]).value
        if decl.regions[0].blocks:
            continue
        ftype = ir.FunctionType(ir.TypeAttr(decl.attributes["function_type"]).value)
        body = None
        if m := re.fullmatch(r"triton_(cumsum|cumprod)_\d+", name):
            body = _scan(name, ftype, m.group(1), by_callee.get(name, []))
        elif re.fullmatch(r"triton_gather(_\d+)?", name):
            body = _gather(name, ftype, by_callee.get(name, []))
        if body is None:
            continue
        parsed = ir.Module.parse(body)
        module.body.append(list(parsed.body.operations)[0].operation)
        decl.erase()


def _static(t) -> list | None:
    from torch_mlir import ir

    t = ir.RankedTensorType(t)
    shape = list(t.shape)
    return None if any(ir.ShapedType.is_dynamic_size(x) for x in shape) else shape


def _constant_int(value):
    from torch_mlir import ir

    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "arith.constant":
        return None
    try:
        return ir.IntegerAttr(owner.attributes["value"]).value
    except (ValueError, TypeError):
        return None


def _scan(name: str, ftype, kind: str, calls: list) -> str | None:
    """x[..., j] = x[..., j-1] op x[..., j] for j = 1..n-1, row by row, in order (eager's order):
    for calls along the last axis, forward (uniorch's scan kernels)."""
    ttype = str(ftype.inputs[0])
    shape = _static(ftype.inputs[0])
    if not shape:
        return None
    rank = len(shape)
    if not all(_constant_int(c.operands[1]) == rank - 1 and _constant_int(c.operands[2]) == 0 for c in calls):
        return None
    from torch_mlir import ir

    elt = str(ir.RankedTensorType(ftype.inputs[0]).element_type)
    op = _SCANS[kind][1 if elt.startswith(("f", "bf")) else 0]
    lines = [f"func.func private @{name}(%x: {ttype}, %axis: i32, %rev: i1) -> {ttype} {{",
             "  %c0 = arith.constant 0 : index", "  %c1 = arith.constant 1 : index"]
    lines += [f"  %n{d} = arith.constant {n} : index" for d, n in enumerate(shape)]
    ivs, acc = [], "%x"
    for d in range(rank - 1):  # every leading index
        lines.append(f"  %r{d} = scf.for %i{d} = %c0 to %n{d} step %c1 iter_args(%a{d} = {acc}) -> ({ttype}) {{")
        ivs.append(f"%i{d}")
        acc = f"%a{d}"
    last = rank - 1
    idx = ", ".join(ivs + ["%j"])
    prev = ", ".join(ivs + ["%jm"])
    lines += [f"  %s = scf.for %j = %c1 to %n{last} step %c1 iter_args(%t = {acc}) -> ({ttype}) {{",
              "    %jm = arith.subi %j, %c1 : index",
              f"    %p = tensor.extract %t[{prev}] : {ttype}",
              f"    %v = tensor.extract %t[{idx}] : {ttype}",
              f"    %w = {op} %p, %v : {elt}",
              f"    %u = tensor.insert %w into %t[{idx}] : {ttype}",
              f"    scf.yield %u : {ttype}", "  }"]
    result = "%s"
    for d in reversed(range(rank - 1)):
        lines += [f"  scf.yield {result} : {ttype}", "  }"]
        result = f"%r{d}"
    lines += [f"  return {result} : {ttype}", "}"]
    return "\n".join(lines)


def _gather(name: str, ftype, calls: list) -> str | None:
    """out[i] = src[i with i[axis] := index[i]]: `(src, index, axis: i32) -> out` with out shaped as
    the index (tl.gather's semantics; an index outside src is the kernel's bug, as in Triton). For
    calls with a constant axis, every other dim of src as long as the index's."""
    from torch_mlir import ir

    if len(ftype.inputs) != 3 or len(ftype.results) != 1:
        return None
    src_t, idx_t, out_t = ftype.inputs[0], ftype.inputs[1], ftype.results[0]
    src, idx, out = _static(src_t), _static(idx_t), _static(out_t)
    axes = {_constant_int(c.operands[2]) for c in calls}
    if not src or idx != out or len(src) != len(idx) or len(axes) != 1:
        return None
    axis = axes.pop()
    if axis is None or not 0 <= axis < len(src) or any(src[d] != idx[d] for d in range(len(src)) if d != axis):
        return None
    rank = len(src)
    ielt = str(ir.RankedTensorType(idx_t).element_type)
    oelt = str(ir.RankedTensorType(out_t).element_type)
    dims = ", ".join(f"d{d}" for d in range(rank))
    parallel = ", ".join(['"parallel"'] * rank)
    ident = f"affine_map<({dims}) -> ({dims})>"
    coords = [f"%i{d}" for d in range(rank)]
    coords[axis] = "%j"
    lines = [f"func.func private @{name}(%src: {src_t}, %idx: {idx_t}, %axis: i32) -> {out_t} {{",
             f"  %e = tensor.empty() : {out_t}",
             f"  %r = linalg.generic {{indexing_maps = [{ident}, {ident}], "
             f"iterator_types = [{parallel}]}} "
             f"ins(%idx : {idx_t}) outs(%e : {out_t}) {{",
             f"  ^bb0(%k: {ielt}, %o: {oelt}):"]
    lines += [f"    %i{d} = linalg.index {d} : index" for d in range(rank) if d != axis]
    lines += [f"    %j = arith.index_cast %k : {ielt} to index",
              f"    %v = tensor.extract %src[{', '.join(coords)}] : {src_t}",
              f"    linalg.yield %v : {oelt}",
              f"  }} -> {out_t}",
              f"  return %r : {out_t}", "}"]
    return "\n".join(lines)
