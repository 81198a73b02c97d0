"""State updates written in place: the kernel computing a mutated input's new value stores it into
that input's memory, instead of a fresh buffer that the capture's `finish` copies back.

A compiled optimizer step updates every parameter and both of AdamW's moments. Written to fresh
buffers and copied back, each state tensor is read and written twice more per step (13 passes over
it instead of 7), and the step holds a second copy of the parameters and the moments at its peak
(a model's weights three times over). The same holds for BatchNorm's running statistics and for a
cache a model updates with `index_copy_`. Inductor writes such inputs in place too (its in/out
pointers).

Safe when nothing reads the old value after the kernel writes: no later kernel of the region reads
the input, nothing views it, no later region or eager op of the program reads it, and the kernel
itself reads it only at the element it writes, before writing it (a pointwise kernel whose stored
result spans its whole domain; the loads of the input happen while computing that result), or it
is a kernel built to write into that input (`uniorch.inplace`: a scatter, an insert_slice). Inputs
are assumed not to alias each other, as the capture assumed when it traced them. At run time the
input must also be contiguous (the layout the kernel's index arithmetic was checked for); else
the update is copied back as before. The first call of a region keeps the copy: if a kernel fails
at its launch, the region reruns eagerly from inputs that are still the old values.
"""
from __future__ import annotations

import math
import operator

import torch.fx as fx
from torch_mlir import ir


def program_writes(program, pairs: list[tuple[int, int]]) -> dict[int, str]:
    """Takes up in-place writes for the state updates `pairs` ((program output, program input))
    where the program allows them: {output: ""} for each taken, {output: why not} otherwise."""
    gm = program.module
    nodes = list(gm.graph.nodes)
    places = [n for n in nodes if n.op == "placeholder"]
    out = next(n for n in nodes if n.op == "output").args[0]
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    return {o: _take(gm, places, out, o, i) for o, i in pairs}


def _take(gm: fx.GraphModule, places: list, out: list, o: int, i: int) -> str:
    from .partition import _Region

    if o >= len(out) or i >= len(places):
        return "not an output of the program"
    value, inp = out[o], places[i]
    if not (isinstance(value, fx.Node) and value.op == "call_function" and value.target is operator.getitem):
        return "not computed by a compiled region"
    call = value.args[0]
    region = getattr(gm, call.target, None) if call.op == "call_module" else None
    if not isinstance(region, _Region):
        return "not computed by a compiled region"
    if list(inp.users) != [call] or list(call.args).count(inp) != 1 or out.count(value) != 1 \
            or len(value.users) != 1:
        return "the input's old value is read elsewhere in the program"
    return plan_writes(region.compiled, value.args[1], list(call.args).index(inp))


def plan_writes(compiled, o: int, a: int) -> str:
    """Takes up writing region output `o` into region input `a`; "" when taken, else why not."""
    plan = compiled.plan
    if plan.symbols:
        return "symbolic sizes"
    if o >= len(plan.outputs):
        return "not an output of the region"
    s = plan.outputs[o]
    if plan.outputs.count(s) != 1 or a in plan.outputs or a in plan.viewed:
        return "the input or its new value is also returned or viewed"
    at = next((n for n, (_, _, outs, _) in enumerate(plan.launches) if s in outs), None)
    if at is None:
        return "not written by a kernel"
    kernel, ins, outs, into = plan.launches[at]
    j = outs.index(s)
    for n, (other, reads, _, _) in enumerate(plan.launches):
        if n > at and a in reads:
            return f"kernel {other.name} reads the old value after {kernel.name} writes the new one"
    positions = [p for p, slot in enumerate(ins) if slot == a]
    why = _writes_where_it_reads(kernel, j, positions, _main_arg_type(compiled, a))
    if why:
        return f"{kernel.name}: {why}"
    plan.pending.append((into, j, a))
    return ""


def _main_arg_type(compiled, a: int):
    from uniorch.passes.ir_utils import main_func

    return main_func(compiled.module).regions[0].blocks[0].arguments[a].type


def _writes_where_it_reads(kernel, j: int, positions: list[int], input_type) -> str:
    func = kernel.func_op
    if func is None:
        return "no kernel function"
    ret = [op for op in func.regions[0].blocks[0].operations][-1]
    if str(ret.operands[j].type) != str(input_type):
        return "the new value's type is not the input's"
    if not positions:
        return ""  # read only by earlier kernels, or not at all
    if kernel.inplace.get(j) in positions and len(positions) == 1:
        return ""  # built to write into that input
    kind = ir.StringAttr(func.attributes["uniorch.kind"]).value if "uniorch.kind" in func.attributes else ""
    if kind != "pointwise":
        return f"a {kind or 'kernel'} reading the input"
    from uniorch.codegen import CodegenError
    from uniorch.codegen.generic_kernel import Kernel as Generic

    try:
        gk = Generic(func)
    except CodegenError as err:
        return f"not laid out: {err}"
    if gk.reductive or gk.symbolic:
        return "a reduction or symbolic kernel"
    store = next(((g, r) for idx, g, r in gk.stores if idx == j), None)
    if store is None or math.prod(ir.RankedTensorType(ret.operands[j].type).shape) != gk.np_:
        return "the new value does not span the kernel's domain"
    where = gk.layout.result_exprs(*store)
    cone, todo = set(), [store[0]]
    while todo:  # the ops evaluated to store the result: their loads come before its store
        g = todo.pop()
        if g not in cone:
            cone.add(g)
            todo.extend(gk.deps.get(g, ()))
    from uniorch.codegen import patterns as pat

    for p in positions:
        for use in gk.args[p].uses:
            user = pat.op_of(use.owner)
            if user not in cone or user not in gk.layout.loops:
                return "reads the input outside what computes the new value"
            if gk.layout.operand_exprs(user, use.operand_number) != where:
                return "reads the input at other elements than it writes"
    return ""
