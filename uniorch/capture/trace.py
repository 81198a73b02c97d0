"""Capture: run the model once under PyTorch's proxy-tensor tracing and keep a functional ATen graph.

We use non-strict `torch.export`, which runs the user's Python as is under three TorchDispatchModes
(FakeTensorMode, FunctionalTensorMode, ProxyTorchDispatchMode) and records every ATen op that
reaches the dispatcher. It already does what a hand-written mode would have to: functionalization
(in-place and view mutations become pure ops plus explicit state updates), lifting parameters and
buffers to graph inputs, pytree input/output specs, `nn_module_stack` and stack traces per node.
Decomposition then runs as a second, re-functionalizing trace (`run_decompositions`), which is why
ops that only turn in-place during decomposition (train-mode batch norm, GRU cells) come out pure;
decomposing inside the first trace would run decompositions above functionalization and leak them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import operator
import threading
import warnings
from typing import Any, Callable, Optional

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind, TensorArgument

from ..errors import AttributeWriteError, CaptureError, StateWriteError
from . import aliases, attribute_guard, causal_mask, cia_ops, covariance, eager_layouts, input_views, int_sizes, \
    side_effects, train_steps
from .checks import CHECK_OPS, as_output_spec  # imported first: it marks the check ops effectful
from .complex_pairs import to_pairs
from .data_dependent import bound_outputs
from .decompositions import decomposition_table
from .flex_math import flex_as_math
from ..runtime import size_guards
from .graph import CapturedGraph, GraphInput, GraphOutput
from .masked_reductions import masked_reductions
from ..runtime.library_pytrees import register_for
from .module_modes import owning_module
from .outside_writes import NoOutsideWrites
from .nested_encoder import NestedEncoderAsEager
from .rnn_cells import CellsAsMath
from .scalar_reads import scalar_reads_as_tensors
from .scatter_rows import scatter_add_rows
from .gated_split import split_gated_projections
from .strided_views import as_strided_as_views
from .symbolic_views import collapse_symbolic_views, decided_min_max, drop_noop_expands, specialized_sizes_as_ints


class _FunctionModule(torch.nn.Module):
    """Lets a plain function be captured like a module; tensors it closes over become constants."""

    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, torch.nn.Module):
            # `uniorch.compile(model.forward)`: the model's parameters and buffers are the
            # capture's, as when compiling the model (a BatchNorm's counter update failed the
            # capture as a write outside the model)
            self.owner = owner

    def forward(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

# outputs that are the new value of a module's own state (capture/graph.py writes them back)
_STATE_UPDATES = ("buffer_mutation", "parameter_mutation")


def as_module(model_or_fn: Any) -> torch.nn.Module:
    if isinstance(model_or_fn, torch.nn.Module):
        return model_or_fn
    if callable(model_or_fn):
        return _FunctionModule(model_or_fn)
    raise CaptureError(f"expected an nn.Module or a callable, got {type(model_or_fn).__name__}")


_EXPORTABLE = (torch.Tensor, int, float, bool, str, type(None))
_TRACING = threading.RLock()


def capturing() -> bool:
    """Whether this thread is inside a capture: a compiled model called by the model being traced
    runs as its model, part of the outer graph. Per thread, unlike `torch.compiler.is_compiling()`,
    which export sets for the whole process."""
    return _TRACING._is_owned()


class _Baked(torch.nn.Module):
    """Calls the model with the arguments export cannot take as inputs (dtypes, devices, layouts,
    arbitrary objects) fixed to their capture-time values; the rest arrive flat, in order."""

    def __init__(self, inner: torch.nn.Module, spec, flat: list, keep: list[int], rows: frozenset = frozenset()):
        super().__init__()
        self.inner, self._spec, self._flat, self._keep, self._rows = inner, spec, flat, keep, rows

    def forward(self, *kept):
        flat = list(self._flat)
        for i, v in zip(self._keep, kept):
            flat[i] = int_sizes.value(v) if i in self._rows else v
        args, kwargs = pytree.tree_unflatten(flat, self._spec)
        return self.inner(*args, **kwargs)


def capture(model_or_fn: Any, args: tuple = (), kwargs: Optional[dict] = None,
            dynamic: Optional[dict[int, set[int]]] = None) -> CapturedGraph:
    """Traces `model_or_fn(*args, **kwargs)` into a CapturedGraph of core ATen ops.

    `dynamic` maps a flat argument index (pytree leaves of `(args, kwargs)`) to the dims of that
    tensor traced as symbolic sizes; export keeps a dim static where the program needs it to be
    (sizes 0 and 1, a dim equated with a constant), and `CapturedGraph.symbols` says what stayed
    symbolic."""
    trains = train_steps.reason_before_tracing(model_or_fn)
    if trains:
        raise train_steps.routed(trains)
    grad_enabled = torch.is_grad_enabled()  # the call's: export may trace under another mode
    module = as_module(model_or_fn)
    register_for(module)
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    kwargs = dict(kwargs or {})
    flat, spec = pytree.tree_flatten((args, kwargs))
    if any(isinstance(v, torch.Tensor) and v.requires_grad for v in flat):
        # the graph is of values, not of autograd (the training path records autograd around the
        # compiled forward: runtime/training.py); export of an input requiring grad would trace it
        flat = [v.detach() if isinstance(v, torch.Tensor) and v.requires_grad else v for v in flat]
        args, kwargs = pytree.tree_unflatten(flat, spec)
    flat, rows = int_sizes.as_rows(flat, dynamic)  # the ints traced as symbolic sizes
    keep = [i for i, v in enumerate(flat) if isinstance(v, _EXPORTABLE)]
    baked = len(keep) < len(flat) or bool(dynamic)
    traced, t_args, t_kwargs = module, args, kwargs
    shapes = named = None
    if dynamic:  # flat positional arguments (as when baking): one shape spec per argument
        shapes = _shape_specs(flat, keep, dynamic, named=False)
        named = _shape_specs(flat, keep, dynamic, named=True)
    if baked:  # constants of the capture like any non-tensor argument, but export cannot see them
        traced, t_args, t_kwargs = _Baked(module, spec, flat, keep, rows), tuple(flat[i] for i in keep), {}
    stop = train_steps.Stop()
    try:
        # one trace at a time in the process: export's tracing modes are global (two threads
        # compiling two models failed with "ProxyTorchDispatchMode slot already occupied")
        with _TRACING, _quiet_tracing(), aliases.recording(module) as found, _lazy_graph_modules(), \
                attribute_guard.recording(module) as (reads, writes):
            watch = side_effects.Watch(owning_module(model_or_fn))
            with NoOutsideWrites(), CellsAsMath(), NestedEncoderAsEager(grad_enabled), covariance.traced(), \
                    causal_mask.as_given(), _InferenceModeSeen(module) as inference, stop:
                ep = _export(traced, t_args, t_kwargs, shapes, named)
            written = watch.changed()
            grad_free = _outputs_without_grad(ep) or inference.throughout()
            if written:  # no use decomposing: the call runs through Dynamo
                watch.undo()
            else:
                layouts = _user_outputs(ep, eager_layouts.output_layouts(ep.graph_module))
                views = _user_outputs(ep, input_views.input_views(ep.graph_module))
                try:
                    with cia_ops.memoized(decomposition_table()) as table:
                        ep = ep.run_decompositions(table)
                except Exception:  # noqa: BLE001 - retried without the rewrites that bring unbacked sizes
                    # a count from nonzero/masked_select/unique that later shape arithmetic cannot
                    # bound symbolically fails the trace; without those rewrites the ops stay eager
                    with cia_ops.memoized(decomposition_table(data_dependent=False)) as table:
                        ep = ep.run_decompositions(table)
                # the decomposed program returns the new values of the inputs it writes first
                eager_layouts.mark(ep.graph_module, _at_user_outputs(ep, layouts))
                input_views.mark(ep.graph_module, _at_user_outputs(ep, views))
    except Exception as exc:  # the user's model raised, or tracing hit something it cannot record
        if stop.seen:  # stopped before the backward or step ran (train_steps.py)
            raise train_steps.routed(stop.seen) from None
        raise CaptureError(f"capturing {_describe(model_or_fn)} failed: {type(exc).__name__}: {exc}") from exc
    changed = attribute_guard.attribute_writes(writes, module)
    if changed:
        err = AttributeWriteError(
            f"the forward sets Python attributes of the model ({', '.join(changed[:3])}"
            f"{' and more' if len(changed) > 3 else ''}), which compiled kernels cannot set: the call runs in "
            f"PyTorch", reads, changed, mutates=_mutates_state(ep))
        if not err.lazy_init:  # else the writes stay, done once (api.py captures again at once)
            attribute_guard.undo_writes(writes, reads)
        raise err
    if written:
        raise StateWriteError(
            f"the forward writes outside the model's graph ({', '.join(written[:3])}"
            f"{' and more' if len(written) > 3 else ''}: a hook or the forward storing a value), which export runs "
            f"once, while tracing: the call runs through Dynamo, which replays such writes at every call")
    kept = attribute_guard.tensor_writes(writes, module)
    if kept:
        raise StateWriteError(
            f"the forward keeps tensors on the model ({', '.join(kept[:3])}{' and more' if len(kept) > 3 else ''}), "
            f"which export does not replay: the call runs through Dynamo, which does")
    try:
        cg = _from_exported(ep, traced, t_args, t_kwargs)
        as_strided_as_views(cg.graph_module)  # GroupNorm's reshape: a view, not a gather of index tables
        scatter_add_rows(cg.graph_module)  # a graph network's message sum: whole rows, not elements
        split_gated_projections(cg.graph_module)  # Phi-3's fused gate/up: two products, one gated kernel
        scalar_reads_as_tensors(cg.graph_module)  # x / t.item(): t stays a 0-d tensor
        if dynamic:
            specialized_sizes_as_ints(cg.graph_module)
            drop_noop_expands(cg.graph_module)
            decided_min_max(cg.graph_module)
            collapse_symbolic_views(cg.graph_module)
        if baked:
            _unbake(cg, module, spec, flat, keep)
        if rows:
            cg.inputs = [dataclasses.replace(i, int_rows=True) if i.kind == "user" and i.target in rows else i
                         for i in cg.inputs]
        cg.aliases = found[0]
        cg.attribute_reads = reads
        cg.grad_free = grad_free
        masked_reductions(cg.graph_module)  # loss[mask].mean(): no op waits for the count
        bound_outputs(cg)
        flex_as_math(cg)
        to_pairs(cg)
        _record_layouts(cg)
    except CaptureError:
        raise
    except Exception as exc:  # a bug in a rewrite of ours: the call runs eagerly (or in Dynamo's pieces), said so
        raise CaptureError(f"capturing {_describe(model_or_fn)} failed in uniorch's rewrites of the exported graph: "
                           f"{type(exc).__name__}: {exc}") from exc
    return cg


class _InferenceModeSeen(torch.overrides.TorchFunctionMode):
    """Whether the traced forward ran every torch call in inference mode (`@torch.inference_mode()`
    on it, as Meta's Llama has), which export does not record: eager's results are inference
    tensors then, which require no grad."""

    def __init__(self, module):
        super().__init__()
        self.outside = torch.is_inference_mode_enabled()
        self.calls = self.inside = 0
        self.active = False  # counting the calls the model's forward makes, not export's own
        self.hooks = []
        if isinstance(module, torch.nn.Module):
            self.hooks = [module.register_forward_pre_hook(lambda *a: setattr(self, "active", True)),
                          module.register_forward_hook(lambda *a: setattr(self, "active", False), always_call=True)]

    def __exit__(self, *exc):
        for h in self.hooks:
            h.remove()
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # not inside Dynamo's own tracing (flex_attention compiles its kernel while export traces),
        # which inlines this method and refuses is_inference_mode_enabled
        if self.active and not torch.compiler.is_dynamo_compiling():
            self.calls += 1
            self.inside += torch.is_inference_mode_enabled()
        return func(*args, **(kwargs or {}))

    def throughout(self) -> bool:
        return not self.outside and self.calls > 0 and self.inside == self.calls


def _outputs_without_grad(ep: ExportedProgram) -> bool:
    """Whether every tensor the user gets is computed with grad disabled (a forward decorated
    with `@torch.no_grad()`, or returning from inside `with torch.no_grad():`): export records
    such a region as `wrap_with_set_grad_enabled(False, ...)`. Eager's results then require no
    grad, whatever the caller's mode."""
    wrap = getattr(torch.ops.higher_order, "wrap_with_set_grad_enabled", None)
    outs = _user_outputs(ep, list(ep.graph.output_node().args[0]))
    tensors = [o for o in outs if isinstance(o, torch.fx.Node) and isinstance(o.meta.get("val"), torch.Tensor)]
    if wrap is None or not tensors:
        return False
    for o in tensors:
        src = o.args[0] if o.target is operator.getitem else None
        if not (isinstance(src, torch.fx.Node) and src.target is wrap and src.args and src.args[0] is False):
            return False
    return True


def _user_outputs(ep: ExportedProgram, per_output: list) -> list:
    """The entries of `per_output` (one per output of `ep`'s graph) for the user's outputs."""
    kinds = [s.kind for s in ep.graph_signature.output_specs]
    if len(kinds) != len(per_output):
        return []
    return [v for k, v in zip(kinds, per_output) if k == OutputKind.USER_OUTPUT]


def _at_user_outputs(ep: ExportedProgram, user: list) -> list:
    """`user` (one entry per user output) spread over all of `ep`'s outputs, None at the others."""
    kinds = [s.kind for s in ep.graph_signature.output_specs]
    if sum(k == OutputKind.USER_OUTPUT for k in kinds) != len(user):
        return [None] * len(kinds)
    it = iter(user)
    return [next(it) if k == OutputKind.USER_OUTPUT else None for k in kinds]


DIM_NAMES = "_uniorch_dim_names"  # on an example tensor: {dim: (name, a, b)}: the dim is a * name + b


def _shape_specs(flat: list, keep: list[int], dynamic: dict, named: bool):
    """Export's dynamic_shapes: `Dim.AUTO` per symbolic dim, or with `named`, one `Dim` per name
    that example tensors give their dims (`DIM_NAMES`: the training path's halves, whose sizes
    Dynamo related), so export knows them equal (an embedding's gradient scatter: the indices'
    and the updates' lengths, else a broadcast it cannot decide)."""
    shared: dict = {}

    def dim(i: int, d: int):
        spec = (getattr(flat[i], DIM_NAMES, None) or {}).get(d) if named else None
        if spec is None:
            return torch.export.Dim.AUTO
        name, a, b = spec
        root = shared.setdefault(name, torch.export.Dim(name, min=2))
        return root if (a, b) == (1, 0) else a * root + b

    return (tuple({d: dim(i, d) for d in sorted(dynamic.get(i, ()))}
                  if isinstance(flat[i], torch.Tensor) and dynamic.get(i) else None for i in keep),)


def _export(traced, args, kwargs, shapes, named):
    """torch.export with the named dims when there are any, else (or when export finds the names'
    claims wrong: a size it specializes, two names it finds related) with `Dim.AUTO` only."""
    if named is not None and named != shapes:
        try:
            return _export_quietly(traced, args, kwargs, named)
        except Exception:  # noqa: BLE001 - the names were a hint; AUTO lets export decide
            pass
    return _export_quietly(traced, args, kwargs, shapes)


def _export_quietly(traced, args, kwargs, shapes):
    """export, without the partial graph it prints to stderr when it fails on a data-dependent
    branch (`if x.sum() > 0`): the failure reaches the user once, as our CaptureError and in
    `explain`. Anything else written to stderr meanwhile is passed on."""
    import io
    import sys

    buffer, partial = io.StringIO(), None
    try:
        with contextlib.redirect_stderr(buffer):
            return torch.export.export(traced, args, kwargs, strict=False, dynamic_shapes=shapes)
    except Exception as exc:
        partial = getattr(exc, "partial_fx_graph", None)
        raise
    finally:
        text = buffer.getvalue()
        if partial:
            text = text.replace(f"{partial}\n", "")  # printed by each of two nested wrappers
        if text:
            sys.stderr.write(text)


def _record_layouts(cg: CapturedGraph) -> None:
    """Each user output's strides and storage offset as traced (eager's), where they are not a
    contiguous tensor's: the boundary lays the kernels' contiguous result out so (runtime/boundary.py
    `laid_out`)."""
    import dataclasses

    values = cg.graph_module.graph.output_node().args[0]
    by_name = {i.name: i for i in cg.inputs}
    for i, (node, spec) in enumerate(zip(values, cg.outputs)):
        val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if (spec.kind != "user" or spec.read is not None or spec.complex_dtype is not None
                or not isinstance(val, torch.Tensor) or val.is_complex()):
            continue
        view = node.meta.get(input_views.INPUT_VIEW) if isinstance(node, torch.fx.Node) else None
        if view is not None and all(n in by_name and by_name[n].kind in ("user", "parameter", "buffer")
                                    and by_name[n].complex_dtype is None for n in view[0]):
            spec = cg.outputs[i] = dataclasses.replace(spec, view_of=(tuple(by_name[n] for n in view[0]), view[1]))
        # symbolic strides stay as computed: int() of a SymInt would specialize its size symbol
        if any(isinstance(s, torch.SymInt) for s in (*val.stride(), val.storage_offset())):
            continue
        stride, offset = tuple(val.stride()), int(val.storage_offset())
        try:
            contiguous = val.is_contiguous()
        except Exception:  # noqa: BLE001 - a size from the data (torch.where(mask)[0]): as computed
            continue
        if offset != 0 or not contiguous:
            cg.outputs[i] = dataclasses.replace(spec, layout=(stride, offset))


def _unbake(cg: CapturedGraph, module: torch.nn.Module, spec, flat: list, keep: list[int]) -> None:
    """Re-expresses a capture of `_Baked` in the user's own argument structure and state names
    (`inner.w` is the model's `w`: live weights and bundles look them up on the model)."""
    import dataclasses

    def own(name):
        return name.removeprefix("inner.") if isinstance(name, str) else name

    cg.in_spec, cg.module, cg.name = spec, module, _describe(module)
    cg.inputs = [dataclasses.replace(i, target=keep[i.target]) if i.kind == "user" else
                 dataclasses.replace(i, target=own(i.target)) for i in cg.inputs]
    cg.outputs = [dataclasses.replace(o, target=keep[o.target]) if o.kind == "user_input_mutation" else
                  dataclasses.replace(o, target=own(o.target)) if o is not None and o.kind in _STATE_UPDATES else o
                  for o in cg.outputs]
    cg.constants = {own(k): v for k, v in cg.constants.items()}
    constants = {keep[k]: v for k, v in cg.constant_args.items()}
    constants.update({i: v for i, v in enumerate(flat) if not isinstance(v, _EXPORTABLE)})
    cg.constant_args = constants


def _from_exported(ep: ExportedProgram, module: torch.nn.Module, args: tuple, kwargs: dict) -> CapturedGraph:
    gm = ep.graph_module
    sig = ep.graph_signature
    in_spec = ep.call_spec.in_spec
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]

    user_index = {}  # placeholder name -> flat user-argument index
    flat_user, _ = pytree.tree_flatten(_reordered(args, kwargs, in_spec))
    inputs: list[GraphInput] = []
    constant_args: dict[int, Any] = {}
    dead_placeholders = []
    tokens = []
    user_pos = 0
    for spec, node in zip(sig.input_specs, placeholders):
        if spec.kind == InputKind.USER_INPUT:
            if isinstance(spec.arg, TensorArgument):
                user_index[spec.arg.name] = user_pos
                inputs.append(GraphInput("user", node.name, user_pos))
            else:  # ints, floats, bools, strings: specialized into the graph
                constant_args[user_pos] = flat_user[user_pos]
                dead_placeholders.append(node)
            user_pos += 1
        elif spec.kind == InputKind.PARAMETER:
            inputs.append(GraphInput("parameter", node.name, spec.target))
            node.meta["uniorch_weight"] = True  # (runtime/compiler.py WEIGHT_META: explain under freeze=True)
        elif spec.kind == InputKind.BUFFER:
            inputs.append(GraphInput("buffer", node.name, spec.target))
            node.meta["uniorch_weight"] = True
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            inputs.append(GraphInput("constant", node.name, spec.target))
        elif spec.kind == InputKind.TOKEN:  # orders effectful ops; checks below replace them
            tokens.append(node)
        else:
            raise CaptureError(f"unsupported graph input kind {spec.kind.name} ({spec.target})")
    for node in dead_placeholders:
        if node.users:
            raise CaptureError(f"non-tensor input {node.name} is used as a value in the graph")
        gm.graph.erase_node(node)

    outputs: list[GraphOutput] = []
    for spec in sig.output_specs:
        if spec.kind == OutputKind.USER_OUTPUT:
            outputs.append(GraphOutput("user"))
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            outputs.append(GraphOutput("buffer_mutation", spec.target))
        elif spec.kind == OutputKind.PARAMETER_MUTATION:  # nn.Embedding(max_norm=...) renormalising its weight
            outputs.append(GraphOutput("parameter_mutation", spec.target))
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            outputs.append(GraphOutput("user_input_mutation", user_index[spec.target]))
        elif spec.kind == OutputKind.TOKEN:
            outputs.append(None)
        else:
            raise CaptureError(f"unsupported graph output kind {spec.kind.name} ({spec.target})")

    outputs = _checks_as_outputs(gm, outputs, tokens)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return CapturedGraph(
        graph_module=gm,
        inputs=inputs,
        outputs=outputs,
        in_spec=in_spec,
        out_spec=ep.call_spec.out_spec,
        constant_args=constant_args,
        module=module,
        constants=dict(ep.constants),
        name=_describe(module),
        symbol_ranges=_symbol_ranges(ep),
        size_guards=size_guards.of_exported(ep, {str(s) for s in ep.range_constraints if str(s).startswith("s")}),
    )


def _symbol_ranges(ep: ExportedProgram) -> dict[str, tuple[int, Optional[int]]]:
    """Export's value range per size symbol: (low, high), high None when unbounded. The shape
    environment's own range where it is narrower: the decompositions' retrace refines it (a
    slice to `min(n, 6)` left n at 6 and up there) and rewrites decide sizes by it
    (`decided_min_max`), while the range constraints kept 2 and up, and n = 3 got 6 rows."""
    from torch.export.exported_program import _get_shape_env

    env = getattr(_get_shape_env(ep.graph_module), "var_to_range", {})

    def bounds(vr):
        lo = int(vr.lower) if getattr(vr.lower, "is_Integer", False) else 0
        hi = int(vr.upper) if getattr(vr.upper, "is_Integer", False) else None  # int_oo: unbounded
        return lo, hi

    out = {}
    for sym, vr in ep.range_constraints.items():
        lo, hi = bounds(vr)
        if sym in env:
            lo2, hi2 = bounds(env[sym])
            lo, hi = max(lo, lo2), hi2 if hi is None else hi if hi2 is None else min(hi, hi2)
        out[str(sym)] = (lo, hi)
    return out


def _checks_as_outputs(gm: torch.fx.GraphModule, outputs: list, tokens: list) -> list[GraphOutput]:
    """Effectful check ops (`_linalg_check_errors`, uniorch's `require`) become extra graph outputs
    of kind "check", evaluated by `CapturedGraph.finish`; their tokens (entries None in `outputs`)
    and `with_effects` wrappers go, leaving a pure graph every later stage understands."""
    out_node = gm.graph.output_node()
    values = [v for v, o in zip(out_node.args[0], outputs) if o is not None]
    outputs = [o for o in outputs if o is not None]
    effectful = []
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is torch.ops.higher_order.with_effects:
            op, args = node.args[1], tuple(node.args[2:])
        elif node.target in CHECK_OPS:
            op, args = node.target, tuple(node.args)
        else:
            continue
        if op not in CHECK_OPS:
            raise CaptureError(f"effectful op {op} is not supported: only checks can run between kernels")
        values.append(args[0])
        outputs.append(GraphOutput("check", as_output_spec(op, args, dict(node.kwargs))))
        effectful.append(node)
    if not effectful and not tokens:
        return outputs
    doomed = set(effectful)
    for node in gm.graph.nodes:  # the token getitems of with_effects
        if node.op == "call_function" and node.target is operator.getitem and node.args[0] in doomed:
            doomed.add(node)
    # a check's own result returned (None: Dynamo's graph of `require(...)` as a statement)
    out_node.args = (tuple(None if v in doomed else v for v in values),)
    for node in reversed(list(gm.graph.nodes)):
        if node in doomed:
            gm.graph.erase_node(node)
    for node in tokens:
        gm.graph.erase_node(node)
    return outputs


def _lazy_graph_modules():
    """Graph modules that generate their Python code when first run or read, as Inductor makes
    them: export and its re-trace rebuild the code of each intermediate graph (20 times for a small
    GPT-2, 10 of them never run), about a tenth of a capture's time."""
    from torch.fx._lazy_graph_module import _use_lazy_graph_module

    return _use_lazy_graph_module(True)


@contextlib.contextmanager
def _quiet_tracing():
    """Tracing failures reach the user once, as our error; torch would also log each one with a
    traceback, and warn about its own pytree internals on every capture."""
    # "Unable to find user code corresponding to {u0}": a data-dependent branch, reported as ours;
    # "0/1 specialized; Dim.AUTO was specified along with a sample input with hint = 1": sizes 0
    # and 1 are never symbolic here, and a trace at 1 (runtime/size_one.py) asks for that on purpose
    loggers = [logging.getLogger(n) for n in ("torch._subclasses.fake_tensor", "torch.fx.experimental.symbolic_shapes",
                                              "torch._export.non_strict_utils")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            # nn.RNN/LSTM/GRU re-assign their own parameter list while tracing; the parameters are
            # still lifted as inputs, so the advice to register buffers does not apply.
            warnings.filterwarnings("ignore", message=r".*_flat_weights.*assigned during export.*")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _reordered(args: tuple, kwargs: dict, in_spec) -> tuple:
    from torch.export._tree_utils import reorder_kwargs

    return (args, reorder_kwargs(kwargs, in_spec)) if kwargs else (args, {})


def _mutates_state(ep) -> bool:
    """Whether the traced program writes the model's tensors or its inputs in place (an ActNorm's
    first-batch initialisation): effects only a run of the graph, not the trace, has."""
    sig = ep.graph_signature
    return bool(sig.buffers_to_mutate or sig.user_inputs_to_mutate or getattr(sig, "parameters_to_mutate", None))


def _describe(obj: Any) -> str:
    if isinstance(obj, _FunctionModule):
        obj = obj.fn
    name = getattr(obj, "__qualname__", None) or type(obj).__name__
    return name if inspect.isfunction(obj) or inspect.isclass(obj) else type(obj).__name__
