"""Training: the forward and backward graphs AOTAutograd makes, each compiled like any model.

A call that autograd must see through (grad enabled, and an input or a training-mode module's
parameter requires grad) is traced by Dynamo and AOTAutograd into a joint graph, split by
Inductor's min-cut partitioner (`min_cut_rematerialization_partition`: saves the fewest bytes for
the backward and recomputes cheap pointwise ops rather than saving them), and each half goes
through uniorch's own path (capture of the graph module, MLIR, fusion, kernels), with eager
fallback per region as for inference. The forward runs inside AOTAutograd's autograd.Function,
whose backward calls the compiled backward; `loss.backward()` then gives eager's gradients.
`TrainingCompile.report` gives each compiled half's report for `explain` (`Report.backward`).

Dynamo caches compiled frames per code object, at most `recompile_limit` (8) of them, and past
that runs the frame eagerly without a word; every `nn.Sequential` shares one `forward`. So each
training path traces through an entry function with a code object of its own (`_entry_point`).
"""
from __future__ import annotations

import itertools
import types
from typing import Any, Optional

import torch
import torch.utils._pytree as pytree


def needs_autograd(model: Any, args: tuple, kwargs: dict) -> bool:
    """Whether this call must record autograd: grad enabled and something it reads requires grad
    (a module's parameters count in training mode only: an eval-mode model called without
    `no_grad` is inference, as it is for most users, until a backward reaches such a call:
    `eval_grad.py`)."""
    if not torch.is_grad_enabled():
        return False
    from ..capture.module_modes import owning_module
    from .eval_grad import TRAINED_IN_EVAL, recomputed

    leaves = args if not kwargs and all(type(a) is torch.Tensor for a in args) else pytree.tree_leaves((args, kwargs))
    model = owning_module(model)  # `uniorch.compile(model.forward)` trains as the model
    if any(isinstance(t, torch.Tensor) and t.requires_grad and not recomputed(t, model) for t in leaves):
        return True
    return (isinstance(model, torch.nn.Module) and (model.training or model in TRAINED_IN_EVAL)
            and any(p.requires_grad for p in model.parameters()))


def _dynamo_recompile_reason() -> Optional[str]:
    """While Dynamo calls the backend: the guard that failed, when this is a recompile of a frame
    (Dynamo's own metrics record, no public API; None where it has none)."""
    try:
        from torch._dynamo.utils import get_metrics_context

        why = get_metrics_context()._metrics.get("recompile_reason")
    except Exception:  # noqa: BLE001 - a private record: the report goes without it
        return None
    if not why:
        return None
    first = str(why).splitlines()[0]
    return first.split("  #", 1)[0].strip()[:300]  # the guard, without the source line Dynamo appends


class TrainingCompile:
    """The training path of one compiled model: Dynamo + AOTAutograd around uniorch's compiles."""

    def __init__(self, model: Any, target, fallback: str, cache_size_limit: int, dynamic: Optional[bool] = None,
                 recompiles: Optional[list] = None):
        self.model, self.target, self.fallback, self.limit = model, target, fallback, cache_size_limit
        self.dynamic = dynamic
        # the compiled model's `recompiles`: Dynamo's reason for each training graph after the first
        self.recompiles = recompiles if recompiles is not None else []
        self.forward: list = []   # uniorch CompiledModules of the forward graphs, in compile order
        self.backward: list = []  # and of the backward graphs
        self.examples: dict = {}  # id(half) -> the inputs it was compiled with (for explain)
        # the forward leaves its saved activations as its kernels wrote them (AOTAutograd said which)
        self.saved_as_written = False
        self.saved: dict = {}  # id(backward half) -> bytes of forward activations it reads (saved)
        # the halves the last call ran, in order: more than one forward graph means Dynamo broke
        # the model into pieces (graph_breaks says where); explain reports them together
        self.ran_forward: list = []
        self.ran_backward: list = []
        self.graph_breaks: list[str] = []  # Dynamo's reasons, as it counted them while compiling
        self.eager_graphs: list[str] = []  # halves uniorch failed to compile, run by PyTorch (why)
        self._compiled: Optional[Any] = None
        self.failure: Optional[str] = None  # why the training path runs eagerly, if it does

    def backend(self):
        """A Dynamo backend: AOTAutograd with uniorch compiling both halves."""
        from torch._dynamo.backends.common import aot_autograd

        def half(store: list):
            def compile_half(gm: torch.fx.GraphModule, example_inputs: list):
                from uniorch.api import CompiledModule

                from .rng_hops import unwrap_seedless
                from .symbolic_halves import sizes_from_tensors

                _views_as_reshapes(gm)
                _inline_composite_ops(gm)
                unwrap_seedless(gm)  # checkpointing's RNG wrappers around SDPA without dropout
                as_given = _copy_graph(gm) if any(isinstance(e, torch.SymInt) for e in example_inputs) else None
                sizes = sizes_from_tensors(gm, example_inputs)
                if sizes is not None:
                    example_inputs = sizes.arguments(example_inputs)
                cm = CompiledModule(gm, self.target, self.fallback, self.limit,
                                    dynamic=None if sizes is not None and sizes.marks else False)
                # `bw_k3_attention`, and `g1_`/`bw1_` for the graphs after a graph break: apart
                # from the forward's kernels in a profile of the step
                n = len(store)
                cm.kernel_prefix = f"bw{n or ''}_" if store is self.backward else f"g{n}_" if n else ""
                store.append(cm)
                visible = _visible_forward_outputs() if store is self.forward else None
                dense: set = set()
                if store is self.backward:
                    self.saved[id(cm)] = saved_activation_bytes(gm)
                    if self.saved_as_written:  # the forward hands them over as its kernels wrote them
                        dense = _saved_inputs(gm)
                try:
                    self.examples[id(cm)] = _compile_now(cm, example_inputs, dense, sizes)
                except Exception as err:  # noqa: BLE001 - a bug of ours: PyTorch runs this graph instead
                    if self.fallback == "error":
                        raise
                    return self._eager_half(gm, store, cm, err)
                if visible is not None:
                    if sizes is not None:  # sizes the caller sees are not the graph's results now
                        visible -= sum(1 for pos, _ in sizes.returned if pos < visible)
                    _saved_outputs_as_written(cm, visible)
                    self.saved_as_written = True
                return _boxed(cm, self.ran_backward if store is self.backward else self.ran_forward, sizes,
                              as_given if sizes is not None and sizes.signed else None)
            return compile_half

        aot = aot_autograd(fw_compiler=half(self.forward), bw_compiler=half(self.backward), partition_fn=partition)

        def traced_without_onednn(gm: torch.fx.GraphModule, example_inputs: list):
            # ATen's CPU LSTM/GRU, on data that needs no gradient, records oneDNN's layer op
            # (`mkldnn_rnn_layer`: an opaque workspace, run by PyTorch); without oneDNN while
            # AOTAutograd traces, PyTorch's own decomposition records the cell math, compiled
            why = _dynamo_recompile_reason()
            if why:
                # the training path's, or Dynamo's pieces of a model export could not capture whole
                self.recompiles.append(f"Dynamo traced the model again ({why})")
            enabled = torch._C._get_mkldnn_enabled()
            torch._C._set_mkldnn_enabled(False)  # (mkldnn.flags() also sets TF32, with a warning)
            try:
                return aot(gm, example_inputs)
            finally:
                torch._C._set_mkldnn_enabled(enabled)

        return traced_without_onednn

    def _eager_half(self, gm: torch.fx.GraphModule, store: list, cm, err: Exception):
        """The graph itself, run by PyTorch, for a half uniorch failed to compile; `explain` lists it."""
        import warnings

        from functorch.compile import make_boxed_func

        store.remove(cm)
        why = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        self.eager_graphs.append(f"a {'backward' if store is self.backward else 'forward'} graph runs in PyTorch "
                                 f"(compiling it failed: {why})")
        warnings.warn(f"uniorch: {self.eager_graphs[-1]}", RuntimeWarning, stacklevel=2)
        return make_boxed_func(gm)

    def report(self, half) -> "Report":
        return half.explain(*self.examples[id(half)])

    def forward_report(self) -> "Report":
        """The forward graphs the last call ran (else the latest compiled) as one report, with
        where Dynamo broke the model and the graphs PyTorch ran."""
        from ..report import FallbackReport, Report, merged_report

        halves = list(dict.fromkeys(self.ran_forward or self.forward[-1:]))
        if not halves:  # Dynamo gave uniorch no graph: the whole call ran in PyTorch, as explain says
            why = self.failure or "no forward graph compiled yet"
            rep = Report(str(self.target), [], [FallbackReport("(whole model)", type(self.model).__name__, "capture",
                                                               f"training path: {why}")], {}, 0, 0, 0, 0)
        else:
            rep = merged_report([self.report(h) for h in halves])
        rep.graph_breaks = list(self.graph_breaks)
        rep.eager_graphs = list(self.eager_graphs)
        return rep

    def __call__(self, *args, **kwargs):
        import warnings

        from torch._dynamo.exc import TorchDynamoException

        from ..capture import causal_mask, covariance

        if self.failure is not None:
            return self.model(*args, **kwargs)
        if self._compiled is None:
            # dynamic as torch.compile's: a second batch size or sequence length traces the model
            # again with symbolic sizes, and the halves compile once for all of them
            self._compiled = torch.compile(_entry_point(self.model), backend=self.backend(), dynamic=self.dynamic,
                                           fullgraph=False)
        from torch._dynamo.utils import counters

        breaks = dict(counters["graph_break"])
        tls = _dispatch_tls()
        self.ran_forward.clear()
        self.ran_backward.clear()
        try:
            # Dynamo leaves nn.RNN/LSTM/GRU to eager PyTorch unless told (allow_rnn), and by default
            # does not guard module hooks: one registered or removed after a compile went unseen
            with torch._dynamo.config.patch(allow_rnn=True, skip_nnmodule_hook_guards=False), \
                    covariance.traced(checks=False), causal_mask.as_given():
                out = self._compiled(*args, **kwargs)
            for reason, n in counters["graph_break"].items():  # counted when Dynamo compiles a frame
                if n > breaks.get(reason, 0) and _break_line(reason) not in self.graph_breaks:
                    self.graph_breaks.append(_break_line(reason))
            if not self.forward:  # Dynamo ran it eagerly all the same: say so rather than pretend
                self.failure = "Dynamo compiled no graph of this call (it ran the model eagerly)"
                warnings.warn(f"uniorch: Dynamo compiled nothing for {type(self.model).__name__}; "
                              f"it runs eagerly", RuntimeWarning, stacklevel=3)
            return out
        except TorchDynamoException as err:
            # Dynamo or AOTAutograd cannot trace this model (an in-place write to a view of a
            # multi-output op, ...): eager PyTorch runs it, with its autograd, from now on; an error
            # of the model itself raises again there, as the user's error
            # an AOTAutograd failure under inference mode left the Python dispatcher's key on in
            # this thread, and every later indexing in the process raised an INTERNAL ASSERT
            _release_guards(err)
            _restore_dispatch_tls(tls)
            if self.fallback == "error":
                raise
            inner = getattr(err, "inner_exception", None)  # BackendCompilerFailed's first line ends at "raised:"
            why = f"{type(inner).__name__}: {inner}" if inner is not None else f"{type(err).__name__}: {err}"
            self.failure = why.strip().splitlines()[0][:300]
            warnings.warn(f"uniorch: Dynamo cannot compile {type(self.model).__name__} and it runs "
                          f"eagerly: {self.failure}", RuntimeWarning, stacklevel=3)
            return self.model(*args, **kwargs)


_TLS_KEYS = ("PythonDispatcher", "PreDispatch", "Python", "PythonTLSSnapshot", "Functionalize", "ADInplaceOrView")


def _dispatch_tls() -> tuple:
    """This thread's dispatcher include and exclude key sets (two calls: taken at every call)."""
    return torch._C._dispatch_tls_local_include_set(), torch._C._dispatch_tls_local_exclude_set()


def _release_guards(err: BaseException) -> None:
    """Destroys the mode guards (PyTorch's C++ RAII objects: inference mode, the Python
    dispatcher, functionalization) that the failed trace's frames still hold through the
    exception's tracebacks, innermost first, so each puts back the state it found. Left alive,
    inference mode stayed on for the thread (every new tensor an inference tensor), and when the
    frames were collected later, out of order, the dispatcher flags of the middle of the trace
    came back."""
    import gc

    frames, seen, todo = [], set(), [err]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        tb = e.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame)
            tb = tb.tb_next
        todo += [e.__cause__, e.__context__, getattr(e, "inner_exception", None)]
    for frame in reversed(frames):
        try:
            frame.clear()
        except RuntimeError:  # a frame still running (ours): its guards are not the trace's
            pass
    gc.collect()


def _restore_dispatch_tls(saved: tuple) -> None:
    """The flags tracing toggles put back as `saved` had them, where they moved."""
    if _dispatch_tls() == saved:
        return
    include, exclude = saved
    for name in _TLS_KEYS:
        key = getattr(torch._C.DispatchKey, name, None)
        if key is not None:
            torch._C._dispatch_tls_set_dispatch_key_included(key, include.has(key))
            torch._C._dispatch_tls_set_dispatch_key_excluded(key, exclude.has(key))


_ENTRIES = itertools.count()


def partition(joint: torch.fx.GraphModule, joint_inputs, **kwargs):
    """The joint graph split by the min-cut partitioner, after written-out attention is rewritten to
    save its scores' log-sum-exp rather than its probabilities (runtime/attention_recompute.py)."""
    from functorch.compile import min_cut_rematerialization_partition

    from .attention_recompute import recompute_attention
    from .rng_hops import save_drawn_random_ops

    recompute_attention(joint)
    save_drawn_random_ops(joint)  # activation checkpointing: dropout's draws saved, not replayed
    return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)


def saved_activation_bytes(backward: torch.fx.GraphModule) -> int:
    """Bytes of the forward's values the backward graph reads: its inputs other than the gradients
    of the outputs (`tangents_*`) and the forward's own inputs (`primals_*`: parameters and user
    inputs, which autograd keeps anyway)."""
    total = 0
    for node in backward.graph.nodes:
        if node.op != "placeholder" or node.name.startswith(("tangents", "primals")):
            continue
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            total += _hint(val.numel()) * val.element_size()  # int() of a symbolic size would specialize it
    return total


# what eager_saved_activation_bytes copies to undo the call's writes at most: past it, no count
SNAPSHOT_LIMIT_BYTES = 1 << 30


def eager_saved_activation_bytes(model: Any, args: tuple, kwargs: dict) -> Optional[int]:
    """The same for eager PyTorch: bytes of the tensors its autograd saves in one forward call,
    counted once per storage, leaving out the parameters', buffers' and inputs' storages. The call's
    effects are undone: the random generator, and every parameter, buffer and input tensor it
    wrote in place (running statistics, an EMA, a weight the forward rescales under no_grad: the
    call `explain` makes must not move the model). None where copying them all for that would
    take more than SNAPSHOT_LIMIT_BYTES."""
    import torch.utils._pytree as pytree

    state = [t for t in (*model.parameters(), *model.buffers())] if isinstance(model, torch.nn.Module) else []
    inputs = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    written = list({id(t): t for t in (*state, *inputs)}.values())
    if sum(t.numel() * t.element_size() for t in written) > SNAPSHOT_LIMIT_BYTES:
        return None
    before = [(t, t._version, t.detach().clone()) for t in written]
    keep = {t.untyped_storage().data_ptr() for t in written}
    saved: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in keep:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    devices = [t.device.index for t in inputs + state if t.device.type == "cuda"]
    try:
        with torch.random.fork_rng(devices=sorted(set(devices))), \
                torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(*args, **kwargs)
    finally:
        with torch.no_grad():
            for t, version, old in before:
                if t._version != version:
                    t.copy_(old)
    return sum(saved.values())


def _entry_point(model):
    """`model(*args, **kwargs)` as a function whose code object no other compile shares."""
    def run(*args, **kwargs):
        return model(*args, **kwargs)

    code = run.__code__.replace(co_name=f"uniorch_training_{next(_ENTRIES)}")
    return types.FunctionType(code, run.__globals__, code.co_name, run.__defaults__, run.__closure__)


def _views_as_reshapes(gm: torch.fx.GraphModule) -> None:
    """AOTAutograd writes a `view` wherever its tracing saw a contiguous layout; capture decomposes
    fused ops (CPU flash attention) into math whose results are laid out otherwise, and the view
    then fails. In a functional graph `reshape` has the same value and takes any layout."""
    aten = torch.ops.aten
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in (aten.view.default, aten._unsafe_view.default):
            node.target = aten.reshape.default
            changed = True
    if changed:
        gm.recompile()


def _inline_composite_ops(gm: torch.fx.GraphModule) -> None:
    """Ops with a CompositeImplicitAutograd kernel (`silu_backward`, `mish_backward` in backward
    graphs) become PyTorch's Python decomposition of them: capture's export keeps such ops whole,
    whatever its decomposition table says (even when called through `op.decompose`), and torch-mlir
    lowers neither."""
    from torch._decomp import decomposition_table

    changed = False
    for node in gm.graph.nodes:
        op = node.target
        if (node.op == "call_function" and isinstance(op, torch._ops.OpOverload) and op in decomposition_table
                and torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")):
            node.target = decomposition_table[op]
            changed = True
    if changed:
        gm.recompile()


def _compile_now(cm, example_inputs: list, dense: set = frozenset(), sizes=None) -> tuple:
    """Compiles a half for its example inputs' spec now: at its first call it would run inside
    AOTAutograd's autograd.Function, where torch.export cannot trace. The inputs are real tensors of
    the examples' shapes (zeros: index inputs stay in range for the trial launch), contiguous at the
    positions in `dense` (the trial launch compiles kernels for the strides the calls will pass)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from .symbolic_halves import mark_symbolic

    # outside Dynamo's tracing context: export would take its fake mode, and the guards of a
    # symbolic capture would become guards of Dynamo's frame
    with unset_fake_temporarily(), torch.no_grad(), torch._guards.tracing(None):
        real = [(torch.zeros(_ints(e.shape), dtype=e.dtype, device=e.device) if i in dense else
                 torch.empty_strided(_ints(e.shape), _ints(e.stride()), dtype=e.dtype, device=e.device).zero_())
                if isinstance(e, torch.Tensor) else _hint(e) if isinstance(e, torch.SymInt) else e
                for i, e in enumerate(example_inputs)]
        mark_symbolic(real, sizes)  # the dims Dynamo made symbolic stay so (symbolic_halves.py)
        cm.entry(tuple(real), {})
    return tuple(real)


def _ints(sizes) -> list[int]:
    """Sizes as ints: a graph compiled with static shapes can still hold SymInts of constant value
    (the saved tensors of gradient checkpointing's recompute), which factory functions refuse."""
    return [_hint(s) for s in sizes]


def _hint(s) -> int:
    """A size's value in the example call, without a guard on it (`int()` of a SymInt adds one)."""
    return int(s.node.hint) if isinstance(s, torch.SymInt) and s.node.hint is not None else int(s)


def _visible_forward_outputs() -> Optional[int]:
    """How many of the forward graph's outputs its caller sees (mutated inputs, the model's
    outputs, their bases); the rest are saved for the backward. From AOTAutograd's metadata of the
    graph being compiled; None where this PyTorch does not say."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    n = getattr(meta, "num_forward", None)
    return n if isinstance(n, int) else None


def _saved_outputs_as_written(cm, visible: int) -> None:
    """Activations the forward saves for the backward leave in the layout the kernels wrote them,
    not eager's: only the compiled backward reads them, and it takes any strides (its views are
    reshapes: `_views_as_reshapes`). Eager's layout of a strided slice (q, k and v split off one
    projection) is a copy into a storage of the whole projection's extent per call."""
    import dataclasses

    for entry in [*cm._cache.values(), *(e for _, e in cm._symbolic)]:
        cg = entry.captured
        if cg is None:
            continue
        user = -1
        for i, out in enumerate(cg.outputs):
            if out.kind != "user":
                continue
            user += 1
            if user >= visible and out.layout is not None:
                cg.outputs[i] = dataclasses.replace(out, layout=None)


def _saved_inputs(gm: torch.fx.GraphModule) -> set:
    """Positions of a backward graph's inputs that are saved activations (not the forward's own
    inputs, `primals_*`, nor the outputs' gradients, `tangents_*`)."""
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return {i for i, name in enumerate(names) if not name.startswith(("tangents", "primals"))}


def _break_line(reason: str) -> str:
    """Dynamo's graph-break message in a line: its headline and the call it could not trace."""
    lines = [ln.strip() for ln in reason.splitlines() if ln.strip()]
    context = next((ln.removeprefix("Developer debug context:").strip() for ln in lines
                    if ln.startswith("Developer debug context:")), "")
    return (lines[0] if lines else reason) + (f" ({context[:200]})" if context else "")


def _copy_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    import copy

    return torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))


def _boxed(cm, ran: list, sizes=None, as_given=None):
    """AOTAutograd calls compiled halves with one list of arguments (boxed), which it may free.
    `as_given`: the graph before its integers became row counts, for a call where one is negative."""
    from functorch.compile import make_boxed_func

    from .symbolic_halves import NegativeSize

    def run(*flat):
        ran.append(cm)
        if sizes is not None:  # sizes the graph reads from its tensors (symbolic_halves.py)
            try:
                flat = sizes.arguments(flat)
            except NegativeSize:
                if as_given is None:
                    raise
                out = as_given(*flat)
                return list(out) if isinstance(out, (tuple, list)) else [out]
        # parameters arrive requiring grad (the autograd.Function records around this call): the
        # compile is of values, and detached inputs (same storage) match the spec compiled for
        out = cm(*[t.detach() if isinstance(t, torch.Tensor) and t.requires_grad else t for t in flat])
        out = out if isinstance(out, (tuple, list)) else (out,)
        return out if sizes is None or not sizes.returned else sizes.results(flat, out)

    return make_boxed_func(run)


def backend_for_dynamo(gm: torch.fx.GraphModule, example_inputs: list, target, fallback: str, limit: int):
    """`torch.compile(backend="uniorch")` on a graph that needs autograd: AOTAutograd around uniorch."""
    return TrainingCompile(gm, target, fallback, limit).backend()(gm, example_inputs)
