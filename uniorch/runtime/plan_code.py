"""A static plan's call as one straight-line Python function, made per input signature.

The plan's steps are closures run in a loop over a list of slots; each decides per call what
follows from its inputs' layout (view or reshape, a relayout copy or none, writing into an input
or a fresh buffer). Under one signature (runtime/bound_launch.py) every such decision is the one
the recorded call made, so the call can be written out as code with the decisions taken: each
slot a local variable, each launch its bound launch (or the plan's launch), each allocation one
call, as Inductor's generated wrapper is. What still depends on values is kept as code: the check
whether a kernel's in-place destination is its output.

The recorded call's steps each leave a trace entry (`plan.py`); `make_call` writes the function
from them, or returns None where a step left none.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from .relayout import relaid


def make_call(trace: list, steps: int, inputs: int, outputs: list[int], bound: list) -> Optional[Callable]:
    """(inputs, ctx, stream) -> the plan's outputs, for calls of the recorded signature; None
    where the trace does not cover every step."""
    if len(trace) != steps or any(entry is None for entry in trace):
        return None
    scope: dict = {"relaid": relaid, "empty": torch.empty}
    names = iter(range(1 << 30))

    def const(value) -> str:
        name = f"c{next(names)}"
        scope[name] = value
        return name

    lines = [f"def call(inputs, ctx, stream):"]
    if inputs:
        lines.append(f"    {', '.join(f's{i}' for i in range(inputs))}, = inputs")
    lines.append("    launch = ctx.launch")
    for entry in trace:
        kind = entry[0]
        if kind == "view":
            _, s, d, size, how = entry
            lines.append(f"    s{d} = s{s}.{how}({const(size)})")
        elif kind == "permute":
            _, s, d, perm = entry
            lines.append(f"    s{d} = s{s}.permute({const(perm)})")
        elif kind == "concat":  # the buffer its pieces' kernels wrote into
            _, d, bid, shape, dtype = entry
            lines.append(f"    s{d} = ctx.buffer({bid}, {const(shape)}, {const(dtype)})")
        elif kind == "slice":
            _, s, d, index, shape = entry
            lines.append(f"    s{d} = s{s}[{const(index)}].reshape({const(shape)})")
        elif kind == "const":
            _, d, value = entry
            lines.append(f"    s{d} = {const(value)}")
        elif kind == "alloc":
            _, d, shape, dtype = entry
            lines.append(f"    s{d} = empty({const(shape)}, dtype={const(dtype)}, device=ctx.device)")
        elif kind == "launch":
            lines.extend(_launch_lines(entry, bound, const))
        else:
            return None
    lines.append(f"    return [{', '.join(f's{o}' for o in outputs)}]")
    src = "\n".join(lines) + "\n"
    exec(compile(src, f"<uniorch plan call {len(trace)} steps>", "exec"), scope)  # noqa: S102 - our own source
    call = scope["call"]
    call.source = src
    return call


def _launch_lines(entry, bound: list, const) -> list[str]:
    _, n, k, ins, outs, relaid_at, results, inplace = entry
    kernel = const(k)
    lines = []
    args = []
    for i, s in enumerate(ins):
        if i in relaid_at:
            lines.append(f"    a{n}_{i} = relaid(s{s}, {const(relaid_at[i])}, False)")
            args.append(f"a{n}_{i}")
        else:
            args.append(f"s{s}")
    res = []
    for j, (how, what) in enumerate(results):
        name = f"r{n}_{j}"
        res.append(name)
        lines.append(f"    {name} = s{what}" if how == "into" else f"    {name} = {const(what)}(ctx)")
    for j, i in inplace.items():  # the destination is still read later: write into a copy
        lines.append(f"    if {args[i]}.data_ptr() != {res[j]}.data_ptr(): {res[j]}.copy_({args[i]})")
    tensors = ", ".join(args + res)
    if bound[n] is not None:
        lines.append(f"    {const(bound[n])}(stream, {tensors})")
    else:
        lines.append(f"    launch({kernel}, [{', '.join(args)}], [{', '.join(res)}])")
    lines.append(f"    {kernel}.launches += 1")
    for j, s in enumerate(outs):
        lines.append(f"    s{s} = {res[j]}")
    return lines


__all__ = ["make_call"]
