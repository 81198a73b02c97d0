"""`explain`'s report of one compile: its kernels, fallbacks, bytes moved against the minimum, and
how each output leaves the graph (`api.py` builds the compiles; `report.py` holds the types)."""
from __future__ import annotations

import torch
import torch.utils._pytree as pytree

from .minimum_bytes import input_bytes, spec_input_bytes
from .report import FallbackReport, KernelReport, Report, compute_types as _compute_types
from .targets import Target


def entry_report(entry, tgt: Target, args, kwargs, spec=None, freeze: bool = False) -> Report:
    """The report of one compile (`api._Entry`) for these inputs.
    `spec` in place of `args` and `kwargs`: the call's guard key (`_spec`) gives the inputs' sizes.
    `freeze`: parameters' layout copies are made once, not counted per call."""
    from .capture.locations import node_source_loc

    cg, program = entry.captured, entry.program
    if cg is None:
        why = FallbackReport("(whole model)", _where_model(), "capture", entry.capture_error)
        return Report(str(tgt), [], [why], dict(entry.timings), 0, 0, 0, 0)
    nodes = {n.name: n for n in cg.graph_module.graph.nodes}
    aten = [n for n in nodes.values() if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]

    def where(name: str) -> str:
        return str(node_source_loc(nodes[name])) if name in nodes else "?"

    kernels = []
    for r, region in enumerate(program.regions):
        for k in region.kernels:
            ops = [(str(nodes[n].target), where(n)) for n in k.nodes if n in nodes]
            name = k.name  # unique in the program: compile_program names each region's kernels apart
            planned = region.plan.kernels.get(k.name)
            func = planned.func_op if planned is not None else None
            note = str(getattr(planned.fn, "note", "") or "") if planned is not None else ""
            runs_as = str(getattr(planned.fn, "runs_as", "") or name) if planned is not None else name
            once = k.weight_relayout if freeze else 0
            kernels.append(KernelReport(name, k.kind, ops, k.schedule, k.bytes_read - once, k.bytes_written - once,
                                        k.source, _compute_types(func), note, k.weight_relayout, runs_as))
    failed = program.fallbacks + program.launch_failures
    fallbacks = [FallbackReport(op, where(n), f.stage, f.reason) for f in failed for n, op in zip(f.nodes, f.ops)]
    eager_now = {n for f in program.launch_failures for n in f.nodes}
    folded = sum(1 for n in aten if n.name in program.folded_nodes)
    compiled = folded + sum(1 for n in aten if n.name in program.compiled_nodes and n.name not in eager_now)
    if spec is not None:
        minimum = spec_input_bytes(cg, spec)
    else:
        minimum = input_bytes(cg, cg.flat_inputs(args, kwargs))
    if program.prelude is not None:  # freeze=True: the kernels read the fold's outputs, not what it read
        minimum = max(0, minimum + program.prelude.minimum_change)
    outs = [n for n in cg.graph_module.graph.nodes if n.op == "output"][0].args[0]
    outs_meta = [o.meta.get("val") if isinstance(o, torch.fx.Node) else None for o in pytree.tree_leaves(outs)]
    for val in outs_meta:
        if isinstance(val, torch.Tensor) and isinstance(val.numel(), int):  # data-dependent sizes: unknown
            minimum += val.numel() * val.element_size()
    moved = sum(k.bytes_read + k.bytes_written for k in kernels)
    boundary = []
    for o, why in entry.writes.items():  # a state update not written in place is copied back
        val = outs_meta[o] if o < len(outs_meta) else None
        if why and isinstance(val, torch.Tensor) and isinstance(val.numel(), int):
            moved += 2 * val.numel() * val.element_size()
            boundary.append(f"state update {_state_name(cg, o)}: copied back after the kernels ({why})")
    allocated = sum(1 for n in aten if n.name in program.allocated_nodes)
    checks = [f"{c['api']}: info == 0" if c["op"] == "linalg_check_errors" else f"require: {c['what']}"
              for c in cg.checks]
    boundary += [_boundary(i, o) for i, o in enumerate(o for o in cg.outputs if o.kind == "user")]
    boundary = [b for b in boundary if b]
    return Report(str(tgt), kernels, fallbacks, dict(entry.timings), len(aten), compiled, moved, minimum, allocated,
                  checks, boundary, list(entry.symbols), folded_ops=folded)


def _state_name(cg, o: int) -> str:
    out = cg.outputs[o]
    return f"'{out.target}'" if out.kind in ("buffer_mutation", "parameter_mutation") else f"of input {out.target}"


def _boundary(i: int, out) -> str:
    """How output i leaves the graph when it is not the kernels' tensor as is."""
    how = []
    if out.complex_dtype is not None:
        how.append(f"view_as_complex ({str(out.complex_dtype).removeprefix('torch.')})")
    if out.view_of is not None:
        how.append("eager's view of an input, made on the caller's tensor (capture/input_views.py)")
    if out.read == "item":
        how.append(".item()")
    elif out.read:
        how.append(f"trimmed along dim {out.read[1]} to a count computed in the kernels")
    return f"output {i}: " + " and ".join(how) if how else ""


def _where_model() -> str:
    return "every op runs eagerly"


__all__ = ["entry_report"]
