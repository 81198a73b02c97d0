"""Region fallback: compile what compiles, run the rest eagerly, and say why.

The captured graph is cut into runs of consecutive nodes (in topological order) that are either
compiled, eager, or allocations (ops whose every output has zero elements: there is nothing to
compute, so the runtime allocates the empty result with eager's shape, strides and dtype and no
kernel; torch-mlir's lowering of some such views divides by zero, killing the process). Before
cutting, ops reading only zero-element tensors are folded into fills (`fold_empty_inputs`), so
what they feed compiles. Every compiled run becomes one `CompiledGraph`; when compiling a run fails, the
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
from torch.fx.graph_module import _copy_attr

from uniorch.targets import Target

from .compiler import CompiledGraph, RegionError, compile_graph

MAX_ATTEMPTS = 64
MAX_HALVINGS = 24  # compiles spent finding the node of failures that name none; then whole runs


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
    # freeze=True: the weight-only nodes split off (runtime/weight_folding.py), run before the
    # module, which reads their outputs after the graph's inputs
    prelude: Optional[Callable] = None
    folded_nodes: set[str] = field(default_factory=set)

    def __call__(self, *inputs):
        if self.prelude is not None:
            inputs = self.prelude(inputs)
        direct = self.__dict__.get("_direct", False)
        if direct is False:
            direct = self.__dict__["_direct"] = _one_region_call(self.module)
        if direct is None:
            return self.module(*inputs)
        region, order, picks = direct
        outs = region.forward(*[inputs[i] for i in order])
        # per output: the region's j-th result, the program's i-th input, or None
        return tuple(outs[v] if k == 0 else inputs[v] if k == 1 else None for k, v in picks)

    @property
    def launch_failures(self) -> list[Fallback]:
        return [m.failure for m in self.module.children() if isinstance(m, _Region) and m.failure is not None]


class _Region(torch.nn.Module):
    """A compiled region that still runs correctly when a kernel fails at its first launch.

    Triton compiles (or the interpreter checks) a kernel when it first runs; if that raises, the
    region switches to its FX subgraph for good, and the failure is reported as a fallback.
    Nothing is lost by retrying: in its first call, kernels only write buffers of their own until
    the region returns (state updates are written into the inputs from the second call on:
    runtime/inplace.py).
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


def _one_region_call(gm: fx.GraphModule):
    """(region, input order, output picks) where the program is one compiled region reading only
    the program's inputs and returning its results, those inputs or None: called without FX's
    generated forward and nn.Module's call machinery (microseconds a call: a small GPU kernel takes
    tens); None otherwise."""
    nodes = list(gm.graph.nodes)
    places = [n for n in nodes if n.op == "placeholder"]
    calls = [n for n in nodes if n.op == "call_module"]
    rest = [n for n in nodes if n.op not in ("placeholder", "call_module", "output")]
    if len(calls) != 1 or not isinstance(getattr(gm, calls[0].target, None), _Region) or calls[0].kwargs:
        return None
    region = calls[0]
    if any(a not in places for a in region.args):
        return None
    if any(n.op != "call_function" or n.target is not operator.getitem or n.args[0] is not region
           or not isinstance(n.args[1], int) for n in rest):
        return None
    out = next(n for n in nodes if n.op == "output").args[0]
    if not isinstance(out, (tuple, list)):
        return None
    picks = []
    for o in out:  # a training half also returns inputs it saves, and None for inputs with no gradient
        if o is None:
            picks.append((2, None))
        elif o in rest:
            picks.append((0, o.args[1]))
        elif o in places:
            picks.append((1, places.index(o)))
        else:
            return None
    return getattr(gm, region.target), [places.index(a) for a in region.args], picks


def _calls(gm) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function"]


def compile_program(gm: fx.GraphModule, target: Target, fallback: str = "eager",
                    compile_region: Optional[Callable[..., CompiledGraph]] = None, kernel_prefix: str = "") -> Program:
    """`compile_region(graph, target, kernel_prefix=...)` compiles one run of nodes or raises
    RegionError naming the nodes that must run eagerly; ahead-of-time compilation passes one that
    stops before loading kernels. Kernels are named `{kernel_prefix}kN_<kind>` in the first
    region, `{kernel_prefix}r1_kN_<kind>` in the second, and so on: unique in the program."""
    compile_region = compile_region or compile_graph
    from .eager_only import reason as eager_only

    fold_empty_inputs(gm)

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
    cuts: set[str] = set()  # where a failing run that named no node was halved, to find the node
    halvings = 0
    for _ in range(MAX_ATTEMPTS):
        runs = _runs(gm, {n for f in eager.values() for n in f.nodes}, allocated, cuts)
        failed = False
        compiled_runs = 0
        for kind, nodes in runs:
            key = frozenset(n.name for n in nodes)
            region = compiled_runs  # its index in the program (_assemble): a failure only splits
            compiled_runs += kind == COMPILED  # the run that failed, so earlier runs keep theirs
            if kind != COMPILED or key in cache:
                continue
            sub = _subgraph(gm, nodes)
            t = time.perf_counter()
            try:
                prefix = kernel_prefix + (f"r{region}_" if region else "")
                cache[key] = compile_region(sub, target, kernel_prefix=prefix)
                for k, v in cache[key].timings.items():
                    timings[k] = timings.get(k, 0.0) + v
            except RegionError as err:
                by_name = {n.name: n for n in nodes}
                if fallback == "error":  # name the ops, not only the stage that refused them
                    ops = ", ".join(dict.fromkeys(str(by_name[n].target) for n in err.nodes if n in by_name))
                    raise RegionError(err.stage, f"{ops}: {err.reason}" if ops else err.reason, err.nodes) from err
                # a getitem follows its source's status: blame the source, or nothing would change
                named = list(dict.fromkeys(
                    by_name[n].args[0].name if by_name[n].target is operator.getitem else n
                    for n in err.nodes if n in key))
                named = [n for n in named if n in key]
                heads = [n.name for n in nodes if n.target is not operator.getitem]
                if len(heads) > 1 and set(named) >= set(heads) and halvings < MAX_HALVINGS:
                    # the failure names no node of its own (torch-mlir blamed a constant it made):
                    # halve the run and compile each half, until the node that fails is alone
                    cuts.add(heads[len(heads) // 2])
                    halvings += 1
                    failed = True
                    timings["failed compiles"] = timings.get("failed compiles", 0.0) + time.perf_counter() - t
                    break
                if cuts and len(heads) == 1:
                    cuts.clear()  # found: the eager node splits the graph, the rest fuses as before
                named = named or sorted(key)
                fb = Fallback(named, [str(by_name[n].target) for n in named], err.stage,
                              _custom_op_note(by_name, named) + err.reason)
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


def _custom_op_note(by_name: dict, named: list[str]) -> str:
    """What a failure blamed on a library's own op means (transformers' grouped_mm_fallback):
    torch-mlir knows ATen, not the op; PyTorch runs it, as torch.compile runs an opaque custom op."""
    target = by_name[named[0]].target if len(named) == 1 and named[0] in by_name else None
    ns = getattr(target, "namespace", None)
    if not isinstance(target, torch._ops.OpOverload) or ns in ("aten", "prims", "uniorch"):
        return ""
    return f"custom op {ns}::{target._opname} has no lowering to MLIR (an opaque op: PyTorch runs it): "


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
    if _symbolic_empty_factory(node, val):
        return AS_CAPTURED
    specs = []
    for v in vals:
        if not isinstance(v, torch.Tensor) or v.is_sparse or v.layout != torch.strided:
            return None
        if not all(isinstance(d, int) for d in (*v.shape, *v.stride())) or v.numel() != 0:
            return None
        specs.append((tuple(v.shape), tuple(v.stride()), v.dtype, v.device))
    return specs if isinstance(val, (list, tuple)) else specs[0]


AS_CAPTURED = "as captured"  # allocation(): the node itself makes the empty tensor, at its symbolic size


def _symbolic_empty_factory(node: fx.Node, val) -> bool:
    """An allocation (`empty`, `new_empty`, ...; no values to compute) of a tensor with zero
    elements at symbolic sizes: a sliding cache's token counter carried as the rows of an
    (n, 0) tensor (runtime/library_pytrees.py). Its shape is known only per call, so the node
    stays as captured, made by PyTorch without a byte of memory, and no op of the graph is left
    to PyTorch on its account."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    name = getattr(node.target, "__name__", "").split(".")[0]
    if name not in ("empty", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"):
        return False
    if not isinstance(val, torch.Tensor) or all(isinstance(d, int) for d in val.shape):
        return False
    return statically_known_true(val.numel() == 0)


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


def _runs(gm, eager_names: set[str], allocated: set[str] = frozenset(),
          cuts: set[str] = frozenset()) -> list[tuple[str, list[fx.Node]]]:
    """Consecutive call nodes with the same status; a getitem follows its source's status; a node
    in `cuts` starts a run of its own."""
    runs: list[tuple[str, list[fx.Node]]] = []
    status: dict[fx.Node, str] = {}
    for n in _calls(gm):
        getitem = n.target is operator.getitem and isinstance(n.args[0], fx.Node) and n.args[0] in status
        if getitem:
            kind = status[n.args[0]]
        else:
            kind = EAGER if n.name in eager_names else ALLOCATED if n.name in allocated else COMPILED
        status[n] = kind
        if runs and runs[-1][0] == kind and (getitem or n.name not in cuts):
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
        elif n.op == "get_attr":  # a higher-order op's subgraph (flex_attention's score_mod), for eager ops
            _copy_attr(gm, root, n.target)
            env[n] = g.get_attr(n.target)
            env[n].meta = dict(n.meta)
    for kind, nodes in runs:
        if kind == ALLOCATED:
            for n in nodes:
                if n.target is operator.getitem:
                    env[n] = g.node_copy(n, lambda x: env[x])
                    continue
                spec = allocation(n)
                env[n] = g.node_copy(n, lambda x: env[x]) if spec == AS_CAPTURED else _allocate(g, spec)
            continue
        if kind == EAGER:
            for n in nodes:
                env[n] = g.node_copy(n, lambda x: env[x])
                if n.target in _OPAQUE_RESULTS:
                    env[n].target = _OPAQUE_RESULTS[n.target]
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


# ---- ops reading zero-element tensors ----------------------------------------------------------
#
# A region holding one is refused by the compiler (torch-mlir's lowering of some views of empty
# tensors divides by zero and kills the process). But a node whose tensor inputs all have zero
# elements computes a result fixed by shapes alone (a sum over nothing is 0, det of a 0x0 matrix
# is 1, mm with an empty inner dim is zeros), and an empty input of a cat contributes nothing:
# rewritten before partitioning, the rest of the graph compiles.

FOLD_NUMEL_MAX = 1 << 22  # elements an op may produce when evaluated at compile time (CPU memory)


def fold_empty_inputs(gm: fx.GraphModule) -> None:
    """Rewrites `gm` in place, in topological order so a folded result (no longer empty) frees
    its users: used zero-element results of multi-result ops become allocations of their own,
    cats drop zero-element inputs, and ops whose tensor inputs all have zero elements become
    `aten.full` of the value they compute (evaluated now, on empty tensors)."""
    changed = False
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target is operator.getitem:
            continue
        if n.target is torch.ops.aten.cat.default:
            changed |= _drop_empty_cat_inputs(n)
        elif _reads_only_empty(n):
            changed |= _fold(gm, n)
        if n.graph is not None and isinstance(n.meta.get("val"), (list, tuple)):
            changed |= _split_off_empty_results(gm, n)
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()


def _static_empty(v) -> bool:
    return (isinstance(v, torch.Tensor) and not v.is_sparse and v.layout == torch.strided
            and all(isinstance(d, int) for d in (*v.shape, *v.stride())) and v.numel() == 0)


def _known_empty(v) -> bool:
    """No elements at any sizes: a static zero among symbolic sizes (the pass-through half of a
    rotary embedding that rotates every dim, `q[..., rot:]`, over a symbolic length)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    return (isinstance(v, torch.Tensor) and not v.is_sparse and v.layout == torch.strided
            and statically_known_true(v.numel() == 0))


def _static(v) -> bool:
    return (isinstance(v, torch.Tensor) and v.layout == torch.strided and not v.is_sparse
            and all(isinstance(d, int) for d in (*v.shape, *v.stride())))


def _reads_only_empty(n: fx.Node) -> bool:
    """Deterministic ops (random ones draw from the generator even for shapes alone) whose
    every tensor input is a static zero-element tensor, with static non-empty results."""
    if not isinstance(n.target, torch._ops.OpOverload):
        return False
    tags = n.target.tags
    if torch.Tag.nondeterministic_seeded in tags or torch.Tag.dynamic_output_shape in tags:
        return False
    if n.target.__name__.split(".")[0].endswith(("empty", "empty_like", "empty_strided", "empty_permuted")):
        return False  # uninitialized memory: nothing to fold
    vals = [a.meta.get("val") for a in n.all_input_nodes]
    tensors = [v for v in vals if isinstance(v, torch.Tensor)]
    if not tensors or not all(_static_empty(v) for v in tensors):
        return False
    if any(not isinstance(v, torch.Tensor) for v in vals):  # symbolic ints among the inputs
        return False
    out = n.meta.get("val")
    outs = out if isinstance(out, (list, tuple)) else [out]
    if not all(_static(v) for v in outs) or sum(v.numel() for v in outs) > FOLD_NUMEL_MAX:
        return False
    return any(v.numel() > 0 for v in outs)


def _evaluate(n: fx.Node):
    """The node's own op on CPU empty tensors of its inputs' dtypes and shapes (values do not
    exist, so the result cannot depend on them); None if that fails."""
    def empty(a: fx.Node):
        v = a.meta["val"]
        return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype, device="cpu")

    args, kwargs = fx.node.map_arg((n.args, n.kwargs), empty)
    if "device" in kwargs:
        kwargs = {**kwargs, "device": "cpu"}
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            return n.target(*args, **kwargs)
    except Exception:  # noqa: BLE001 - whatever the op rejects stays with the op, at run time
        return None


def _uniform_value(t: torch.Tensor):
    """The one value every element of `t` holds (bit for bit up to NaN payloads), or None."""
    flat = t.reshape(-1)
    first = flat[:1]
    if t.dtype.is_complex:
        return None
    if t.dtype.is_floating_point:
        if bool(first.isnan()):
            return float("nan") if bool(flat.isnan().all()) else None
        if not (torch.equal(flat, first.expand_as(flat)) and torch.equal(flat.signbit(), first.signbit().expand_as(flat))):
            return None
    elif not torch.equal(flat, first.expand_as(flat)):
        return None
    return first.item()


def _fold(gm: fx.GraphModule, n: fx.Node) -> bool:
    result = _evaluate(n)
    if result is None:
        return False
    val = n.meta["val"]
    multi = isinstance(val, (list, tuple))
    results = list(result) if multi else [result]
    vals = list(val) if multi else [val]
    if len(results) != len(vals):
        return False
    users = {u.args[1]: u for u in n.users if u.target is operator.getitem} if multi else {0: n}
    if multi and len(users) != len(n.users):
        return False  # a result used other than through getitem
    replacements = {}
    for i, user in users.items():
        r, v = results[i], vals[i]
        if not isinstance(r, torch.Tensor) or r.dtype != v.dtype or tuple(r.shape) != tuple(v.shape):
            return False
        if r.numel() == 0:
            replacements[i] = (user, None)
            continue
        value = _uniform_value(r)
        if value is None:
            return False  # a result with differing elements (none seen so far): left as it is
        replacements[i] = (user, value)
    for i, (user, value) in replacements.items():
        v = vals[i]
        with gm.graph.inserting_before(n):
            if value is None:
                new = _allocate(gm.graph, (tuple(v.shape), tuple(v.stride()), v.dtype, v.device))
            else:
                new = gm.graph.call_function(torch.ops.aten.full.default, (list(v.shape), value),
                                             {"dtype": v.dtype, "layout": torch.strided, "device": v.device,
                                              "pin_memory": False})
        new.meta = {**n.meta, "val": v}
        user.replace_all_uses_with(new)
        if user is not n:
            gm.graph.erase_node(user)
    if not n.users:
        gm.graph.erase_node(n)
    return True


def _drop_empty_cat_inputs(n: fx.Node) -> bool:
    """A cat without its zero-element inputs, static or at symbolic sizes: they add no rows (ATen
    skips legacy 1-d `empty(0)` inputs whatever their rank, and every other empty input has size 0
    along `dim`). Kept as it
    is when the dropped inputs took part in dtype promotion: the rest would promote otherwise."""
    tensors, rest = n.args[0], n.args[1:]
    if not all(isinstance(t, fx.Node) for t in tensors):
        return False
    vals = [t.meta.get("val") for t in tensors]
    keep = [t for t, v in zip(tensors, vals) if not _known_empty(v)]
    out = n.meta.get("val")
    if len(keep) == len(tensors) or not keep or not isinstance(out, torch.Tensor):
        return False
    dtype = keep[0].meta["val"].dtype
    for t in keep[1:]:
        dtype = torch.promote_types(dtype, t.meta["val"].dtype)
    if dtype != out.dtype:
        return False
    n.args = (keep, *rest)
    return True


def _rnn_layer_with_workspace(*args, **kwargs):
    """oneDNN's LSTM layer (ATen's CPU LSTM as AOTAutograd records it) returns its workspace only
    while grad mode is on, and a training forward runs with it off: the backward then read None
    (or, allocated from the meta shape, an empty tensor, and crashed). The inputs arrive detached,
    so grad mode records nothing here."""
    with torch.enable_grad():
        return torch.ops.aten.mkldnn_rnn_layer.default(*args, **kwargs)


_rnn_layer_with_workspace.eager_op = torch.ops.aten.mkldnn_rnn_layer.default  # what bundles store


# ops whose meta function describes a result the real kernel does not return as described, run
# eagerly through a function that gets it: oneDNN's LSTM layer describes its workspace (read by its
# backward) as an empty uint8 tensor, where the kernel returns thousands of floats
_OPAQUE_RESULTS = {torch.ops.aten.mkldnn_rnn_layer.default: _rnn_layer_with_workspace}


def _split_off_empty_results(gm: fx.GraphModule, n: fx.Node) -> bool:
    """Used zero-element results of a multi-result op (batch norm's reserve, det's LU of a 0x0
    matrix) become allocations of their own, so the op itself can compile for the others."""
    if n.target in _OPAQUE_RESULTS:
        return False
    vals = n.meta["val"]
    changed = False
    for u in list(n.users):
        if u.target is not operator.getitem or not isinstance(u.args[1], int):
            continue
        v = vals[u.args[1]]
        if not _static_empty(v) or all(_static_empty(w) for w in vals if isinstance(w, torch.Tensor)):
            continue  # every result empty: the whole op is an allocation already
        with gm.graph.inserting_before(u):
            new = _allocate(gm.graph, (tuple(v.shape), tuple(v.stride()), v.dtype, v.device))
        new.meta = {**u.meta, "val": v}
        u.replace_all_uses_with(new)
        gm.graph.erase_node(u)
        changed = True
    return changed
