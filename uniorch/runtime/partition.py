"""Region fallback: compile what compiles, run the rest eagerly, and say why.

The captured graph is cut into runs of consecutive nodes (in topological order) that are either
compiled, eager, or allocations (ops whose every output has zero elements: there is nothing to
compute, so the runtime allocates the empty result with eager's shape, strides and dtype and no
kernel; torch-mlir's lowering of some such views divides by zero, killing the process). Every compiled run becomes one `CompiledGraph`; when compiling a run fails, the
FX nodes named by the failure (or, without names, the whole run) become eager and the graph is cut
again. The result is an FX GraphModule calling compiled regions and plain ATen ops in order.
"""
from __future__ import annotations

import operator
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
import torch.fx as fx

from uniorch.targets import Target

from .compiler import CompiledGraph, RegionError, compile_graph

MAX_ATTEMPTS = 64


@dataclass
class Fallback:
    nodes: list[str]
    ops: list[str]  # ATen targets
    stage: str
    reason: str


@dataclass
class Program:
    module: fx.GraphModule  # calls regions (submodules named region_i) and eager ATen ops
    regions: list[CompiledGraph]
    fallbacks: list[Fallback]
    compiled_nodes: set[str]  # allocated ones included: no ATen op runs for them
    timings: dict[str, float] = field(default_factory=dict)
    allocated_nodes: set[str] = field(default_factory=set)

    def __call__(self, *inputs):
        return self.module(*inputs)

    @property
    def launch_failures(self) -> list[Fallback]:
        return [m.failure for m in self.module.children() if isinstance(m, _Region) and m.failure is not None]


class _Region(torch.nn.Module):
    """A compiled region that still runs correctly when a kernel fails at its first launch.

    Triton compiles (or the interpreter checks) a kernel when it first runs; if that raises, the
    region switches to its FX subgraph for good, and the failure is reported as a fallback.
    Nothing is lost by retrying: kernels only write buffers of their own until the region returns.
    """

    def __init__(self, compiled: CompiledGraph, eager: fx.GraphModule, nodes: list[fx.Node]):
        super().__init__()
        self.compiled = compiled
        self.eager = eager
        self.nodes = [n.name for n in nodes]
        self.ops = [str(n.target) for n in nodes]
        self.failure: Fallback | None = None

    def forward(self, *inputs):
        if self.failure is None:
            try:
                return self.compiled(*inputs)
            except Exception as err:  # noqa: BLE001 - any launch failure means: not this kernel
                if self.fallback_mode == "error":
                    raise RegionError("launch", f"{type(err).__name__}: {err}", self.nodes) from err
                self.failure = Fallback(self.nodes, self.ops, "launch", f"{type(err).__name__}: {err}")
        return self.eager(*inputs)

    fallback_mode = "eager"


def _calls(gm) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function"]


def compile_program(gm: fx.GraphModule, target: Target, fallback: str = "eager",
                    compile_region: Optional[Callable[[fx.GraphModule, Target], CompiledGraph]] = None) -> Program:
    """`compile_region` compiles one run of nodes or raises RegionError naming the nodes that
    must run eagerly; ahead-of-time compilation passes one that stops before loading kernels."""
    compile_region = compile_region or compile_graph
    from .eager_only import reason as eager_only

    eager: dict[str, Fallback] = {}
    for n in _calls(gm):
        why = eager_only(n.target, n)
        if why and fallback == "error":
            raise RegionError("import", f"{n.target}: {why}", [n.name])
        if why:
            eager[n.name] = Fallback([n.name], [str(n.target)], "import", why)
    allocated = {n.name for n in _calls(gm) if n.name not in eager and allocation(n) is not None}
    cache: dict[frozenset, CompiledGraph] = {}
    timings: dict[str, float] = {}
    for _ in range(MAX_ATTEMPTS):
        runs = _runs(gm, {n for f in eager.values() for n in f.nodes}, allocated)
        failed = False
        for kind, nodes in runs:
            key = frozenset(n.name for n in nodes)
            if kind != COMPILED or key in cache:
                continue
            sub = _subgraph(gm, nodes)
            t = time.perf_counter()
            try:
                cache[key] = compile_region(sub, target)
                for k, v in cache[key].timings.items():
                    timings[k] = timings.get(k, 0.0) + v
            except RegionError as err:
                if fallback == "error":
                    raise
                by_name = {n.name: n for n in nodes}
                # a getitem follows its source's status: blame the source, or nothing would change
                named = list(dict.fromkeys(
                    by_name[n].args[0].name if by_name[n].target is operator.getitem else n
                    for n in err.nodes if n in key)) or sorted(key)
                named = [n for n in named if n in key] or sorted(key)
                fb = Fallback(named, [str(by_name[n].target) for n in named], err.stage, err.reason)
                for n in named:
                    eager[n] = fb
                failed = True
                timings["failed compiles"] = timings.get("failed compiles", 0.0) + time.perf_counter() - t
                break
        if not failed:
            break
    else:
        raise RegionError("partition", f"gave up after {MAX_ATTEMPTS} attempts", [])
    top, regions, compiled_nodes = _assemble(gm, runs, cache, fallback)
    fallbacks = list({id(f): f for f in eager.values()}.values())
    done = {n.name for kind, nodes in runs if kind == ALLOCATED for n in nodes}
    return Program(top, regions, fallbacks, compiled_nodes | done, timings, done)


COMPILED, EAGER, ALLOCATED = "compiled", "eager", "allocated"


def allocation(node: fx.Node):
    """(shape, stride, dtype, device) of each output when every output of `node` is a tensor with
    zero elements and static sizes, else None. A single tensor gives one tuple, not a list."""
    if node.op != "call_function" or node.target is operator.getitem:
        return None
    if node.target is torch.ops.aten._assert_tensor_metadata.default:
        # a check with no result, which the guards already make; on an empty tensor it would
        # otherwise be the one op of its region left to PyTorch
        return [] if any(_empty(a) for a in node.all_input_nodes) else None
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    if not vals:
        return None
    specs = []
    for v in vals:
        if not isinstance(v, torch.Tensor) or v.is_sparse or v.layout != torch.strided:
            return None
        if not all(isinstance(d, int) for d in (*v.shape, *v.stride())) or v.numel() != 0:
            return None
        specs.append((tuple(v.shape), tuple(v.stride()), v.dtype, v.device))
    return specs if isinstance(val, (list, tuple)) else specs[0]


def _empty(node: fx.Node) -> bool:
    v = node.meta.get("val")
    return isinstance(v, torch.Tensor) and isinstance(v.numel(), int) and v.numel() == 0


def _allocate(g: fx.Graph, spec):
    """Nodes creating the empty result(s) of an op whose outputs have no elements: an ATen
    `empty_strided`, so ahead-of-time bundles store them like any op (the capture's fake tensors
    carry the real device, and the guards check input devices)."""
    if isinstance(spec, list):
        return tuple(_allocate(g, s) for s in spec)
    shape, stride, dtype, device = spec
    return g.call_function(torch.ops.aten.empty_strided.default, (list(shape), list(stride)),
                           {"dtype": dtype, "device": device})


def _runs(gm, eager_names: set[str], allocated: set[str] = frozenset()) -> list[tuple[str, list[fx.Node]]]:
    """Consecutive call nodes with the same status; a getitem follows its source's status."""
    runs: list[tuple[str, list[fx.Node]]] = []
    status: dict[fx.Node, str] = {}
    for n in _calls(gm):
        if n.target is operator.getitem and isinstance(n.args[0], fx.Node) and n.args[0] in status:
            kind = status[n.args[0]]
        else:
            kind = EAGER if n.name in eager_names else ALLOCATED if n.name in allocated else COMPILED
        status[n] = kind
        if runs and runs[-1][0] == kind:
            runs[-1][1].append(n)
        else:
            runs.append((kind, [n]))
    return runs


def _boundary(gm, nodes: list[fx.Node]):
    inside = set(nodes)
    inputs: list[fx.Node] = []
    for n in nodes:
        for a in n.all_input_nodes:
            if a not in inside and a not in inputs:
                inputs.append(a)
    outputs = [n for n in nodes if any(u not in inside for u in n.users)]
    return inputs, outputs


def _subgraph(gm, nodes: list[fx.Node]) -> fx.GraphModule:
    inputs, outputs = _boundary(gm, nodes)
    g = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for a in inputs:
        p = g.placeholder(a.name)
        p.meta = dict(a.meta)
        env[a] = p
    for n in nodes:
        env[n] = g.node_copy(n, lambda x: env[x])
    g.output(tuple(env[o] for o in outputs))
    return fx.GraphModule(gm, g)


def _assemble(gm, runs, cache, fallback):
    root = torch.nn.Module()
    g = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    regions: list[CompiledGraph] = []
    compiled_nodes: set[str] = set()
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            env[n] = g.placeholder(n.name)
            env[n].meta = dict(n.meta)
    for kind, nodes in runs:
        if kind == ALLOCATED:
            for n in nodes:
                if n.target is operator.getitem:
                    env[n] = g.node_copy(n, lambda x: env[x])
                    continue
                env[n] = _allocate(g, allocation(n))
            continue
        if kind == EAGER:
            for n in nodes:
                env[n] = g.node_copy(n, lambda x: env[x])
            continue
        inputs, outputs = _boundary(gm, nodes)
        region = cache[frozenset(n.name for n in nodes)]
        name = f"region_{len(regions)}"
        wrapper = _Region(region, _subgraph(gm, nodes), nodes)
        wrapper.fallback_mode = fallback
        root.add_module(name, wrapper)
        regions.append(region)
        compiled_nodes.update(n.name for n in nodes)
        call = g.call_module(name, tuple(env[a] for a in inputs))
        for i, o in enumerate(outputs):
            env[o] = g.call_function(operator.getitem, (call, i))
    out = next(n for n in gm.graph.nodes if n.op == "output")
    g.output(fx.graph.map_arg(out.args[0], lambda x: env[x]))
    return fx.GraphModule(root, g), regions, compiled_nodes
