"""The public entry points: `compile`, `explain`, and the `torch.compile` backend (docs/design.md)."""
from __future__ import annotations

import functools
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.utils._pytree as pytree

from .capture import CapturedGraph, capture
from .capture.trace import capturing
from .compiled_nn import ModuleFacade, model_attribute
from .capture.module_modes import (SEP, autocast_tag, module_modes, split_autocast, split_grad, split_modes,
                                   split_params)
from .report import FallbackReport, KernelReport, Report, compute_types as _compute_types, merged_report  # noqa: F401 - public names
from .entry_report import entry_report as _report
from .runtime import eval_grad, frozen_layouts, weight_folding
from .runtime.boundary import CheckFailed
from .runtime.compiler import trials_on_interpreter
from .runtime.guards import LIMIT_HINT as _LIMIT_HINT, call_spec as _spec, shallow_key as _shallow_key
from .runtime.inplace import program_writes
from .runtime.partition import Program, compile_program
from .targets import Target, parse_target, require_runnable

# torch.compile's recompile limit is 8 per code object; a transformers LM here is one compiled
# model whose forward, prefill with and without a mask, first decode step and symbolic decode (per
# generate mode) are separate specs: a session mixing forward calls and two generate modes held 8,
# and every later new spec ran eagerly
DEFAULT_CACHE_LIMIT = 16


@dataclass
class _Entry:
    captured: Optional[CapturedGraph]  # None: capture failed and the whole call runs eagerly
    program: Optional[Program]
    timings: dict[str, float]
    capture_error: str = ""
    symbols: list[str] = field(default_factory=list)  # symbolic sizes: "s0: input 0 dim 1, 2..∞"
    dynamic: Optional[dict] = None  # the dims captured symbolic (flat argument -> dims), if any
    # state updates (output index -> "" when the kernel writes it into the input, else why it is
    # copied back): runtime/inplace.py
    writes: dict = field(default_factory=dict)
    attrs: Any = None  # the model's Python values the capture read (capture/attribute_guard.py)
    sets_attributes: bool = False  # eager because the forward sets Python attributes (errors.AttributeWriteError)
    # export could not capture the call (a branch on a tensor's value, vmap, NumPy): Dynamo tries it
    export_failed: bool = False
    keeps_state: bool = False  # the forward sets tensors on its modules (errors.StateWriteError): Dynamo replays it


def _size_in(key, i: int, d: int) -> Optional[int]:
    """Dim d of flat argument i in an input spec, if it is a tensor of that rank."""
    leaves = key[1]
    if i < len(leaves) and leaves[i][0] == "T" and d < len(leaves[i][1]):
        return leaves[i][1][d]
    return None


# recompiles of one argument structure at new sizes, after which a symbolic compile serves the
# sizes even where it leaves a few more ops to PyTorch (an MoE's sort of symbolic length): a
# compile per prompt length costs seconds, an op run eagerly microseconds
_STATIC_RECOMPILES = 1


def _eager_ops(entry: _Entry) -> int:
    """ATen ops a compile leaves to PyTorch (size reads aside: a symbolic capture has more of them)."""
    if entry.captured is None or entry.program is None:
        return 1 << 30
    names = set(entry.program.compiled_nodes) - {n for f in entry.program.launch_failures for n in f.nodes}
    return sum(1 for n in entry.captured.graph_module.graph.nodes
               if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and n.name not in names
               and n.target is not torch.ops.aten.sym_size.int and not _allocated(entry, n.name))


def _allocated(entry: _Entry, name: str) -> bool:  # or folded under freeze=True: no ATen call per call
    return name in entry.program.allocated_nodes or name in entry.program.folded_nodes


class CompiledModule:
    """What `uniorch.compile` returns: called like the model, compiled once per input spec."""

    def __init__(self, model_or_fn: Any, target: Target, fallback: str, cache_size_limit: int,
                 dynamic: Optional[bool] = None, cuda_graphs: bool = False, freeze: bool = False):
        self._model = model_or_fn
        self._cuda_graphs = cuda_graphs
        self._freeze = freeze
        if freeze:  # its weights' layout copies are kept (runtime/frozen_layouts.py)
            frozen_layouts.register_module(model_or_fn)
        self._target = target
        self._fallback = fallback
        self._limit = cache_size_limit
        self._dynamic = dynamic
        self._cache: dict = {}
        self._spec_memo: dict = {}  # positional tensors' metadata -> their _spec
        self._symbolic: list = []  # (SymbolicGuard, _Entry): compiles serving many sizes
        self._varying: dict[int, set[int]] = {}  # automatic dynamic: dims seen with two sizes
        self._rejected: dict = {}  # dims tried symbolic and not kept -> why
        # dims whose symbolic compile left more ops to PyTorch than a static one: (guard, entry,
        # sizes compiled statically since); once the sizes keep changing it serves them after all
        self._held: dict = {}
        self._stale: dict = {}  # spec -> earlier compiles whose attribute values no longer hold
        self._not_one: dict = {}  # (symbol, id(entry)) whose size 1 differs from the symbolic program -> why
        self.recompiles: list[str] = []  # why each compile after the first happened, and what it became
        self._lock = threading.Lock()
        self._warned = False
        self._training = None
        self._keeps_state = None  # the entry of a forward keeping tensors on its modules: Dynamo runs every call
        # argument structure -> the entry of a call export could not capture and Dynamo then ran:
        # other sizes and ints of that structure go to Dynamo too, whose automatic dynamic makes
        # them symbolic, rather than an export that fails again per value
        self._routed: dict = {}
        self._inner: dict = {}  # id(module) -> its compile, for generate through a wrapper (generation.py)
        self._tagged: dict = {}  # id(spec) -> (spec, tag, the spec with the tag folded in)

        self._modes = module_modes(model_or_fn)  # train/eval flags are part of the guard
        # the last call's spec, and (entry, spec) of the last call with arguments (what explain()
        # with none reports); items of a list, as an attribute write costs a Python call on the
        # nn.Module side (compiled_nn.py)
        self._last: list = [None, None]
        self.kernel_prefix = ""  # starts each kernel's name: what a profiler tells compiles apart by
        if not isinstance(model_or_fn, torch.nn.Module):
            functools.update_wrapper(self, model_or_fn, updated=())

    def __reduce__(self):
        """Pickled as the model and the options (`torch.save(compiled)`); compiled anew when loaded."""
        return (_rebuild, (type(self), self._model, self._target, self._fallback, self._limit, self._dynamic,
                           self._cuda_graphs, self.kernel_prefix, self._freeze))

    def __deepcopy__(self, memo):
        """A copy of the model, compiled anew at its first call (an EMA copy, a second replica):
        kernels and launch plans hold MLIR and device objects, which do not copy."""
        import copy

        twin = type(self)(copy.deepcopy(self._model, memo), self._target, self._fallback, self._limit,
                          dynamic=self._dynamic, cuda_graphs=self._cuda_graphs, freeze=self._freeze)
        twin.kernel_prefix = self.kernel_prefix
        return twin

    def __getattr__(self, name: str):
        """The model's own public attributes (`parameters()`, `zero_grad()`, `train()`,
        `state_dict()`, a submodule), as torch.compile's module wrapper forwards them, so an
        optimizer is made and stepped from the compiled model as from the model."""
        model = self.__dict__.get("_model")
        if model is None or name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return model_attribute(self, model, name)

    @property
    def target(self) -> Target:
        return self._target

    def _spec(self, args: tuple, kwargs: dict):
        """`_spec(args, kwargs)`, remembered per tensor metadata for calls of positional tensors and
        lists of them (the common calls: pytree's flatten is microseconds a call, a small GPU
        kernel tens), with the modules' train/eval flags folded into its structure."""
        key = self._inputs_spec(args, kwargs)
        tag = (self._modes.tag() if self._modes is not None else "") + autocast_tag()
        if not tag:
            return key
        # the tagged key made once per (spec, tag): a new string each call would be hashed anew
        # each call (a transformers cache's structure runs to kilobytes)
        memo = self._tagged.get(id(key))
        if memo is not None and memo[0] is key and memo[1] == tag:
            return memo[2]
        full = (key[0] + SEP + tag, key[1])
        if len(self._tagged) >= 256:
            self._tagged.clear()
        self._tagged[id(key)] = (key, tag, full)
        return full

    def _inputs_spec(self, args: tuple, kwargs: dict):
        if kwargs:
            return _spec(args, kwargs)
        fast = _shallow_key(args)
        if fast is None:
            return _spec(args, kwargs)
        key = self._spec_memo.get(fast)
        if key is None:
            if len(self._spec_memo) >= 256:  # sizes that vary call to call: keep it bounded
                self._spec_memo.clear()
            key = self._spec_memo[fast] = _spec(args, kwargs)
        return key

    def _cached(self, key) -> Optional[_Entry]:
        entry = self._cache.get(key)
        if entry is not None and (entry.attrs is None or entry.attrs.holds()):
            return entry
        for old in self._stale.get(key, ()):  # compiles for other values of the model's attributes
            if old.attrs.holds():
                return old
        for guard, sym in self._symbolic:
            if guard.check(key) is None and (sym.attrs is None or sym.attrs.holds()):
                return sym
        return None

    def _attrs_changed(self, key) -> str:
        """Why a compile for this spec no longer serves: the model's attributes it read changed."""
        for entry in [self._cache.get(key)] + [sym for guard, sym in self._symbolic if guard.check(key) is None]:
            if entry is not None and entry.attrs is not None and not entry.attrs.holds():
                what = entry.attrs.changed()
                return what if what.startswith("forward hooks") else f"attributes changed ({what})"
        return ""

    def entry(self, args: tuple, kwargs: dict) -> Optional[_Entry]:
        key = self._last[0] = self._spec(args, kwargs)
        if self._keeps_state is not None:  # its code keeps state whatever the sizes: no capture to retry
            return self._keeps_state
        routed = self._routed.get(key[0])
        if routed is not None and key not in self._cache:
            return routed
        entry = self._cached(key)
        if entry is not None:
            return entry
        with self._lock:  # one compile per spec even when threads call at once
            entry = self._cached(key)
            if entry is not None:
                return entry
            if self.cache_size >= self._limit:
                if not self._warned:
                    warnings.warn(f"uniorch: {self.cache_size} compiles held for this model (cache_size_limit="
                                  f"{self._limit}); further new input specs run eagerly. {_LIMIT_HINT}", stacklevel=3)
                    self._warned = True
                return None
            _check_devices(args, kwargs, self._target)
            why = self._attrs_changed(key)
            state = why or self._state_changed(key)  # not the inputs: no note about sizes
            baseline = None
            if not why:
                entry = self._admit_ones(key, args, kwargs)
                if entry is not None:
                    return entry
                why, baseline = self._why_new(key)
                why = state or why
                entry = self._compile_symbolic(args, kwargs, key, why, baseline)
                if entry is not None:
                    return entry
            entry = _compile_entry(self._model, args, kwargs, self._target, self._fallback,
                                   cuda_graphs=self._cuda_graphs, kernel_prefix=self.kernel_prefix, freeze=self._freeze)
            if key in self._cache:  # kept: the attributes may go back to its values
                before = self._cache[key]
                if entry.sets_attributes and before.sets_attributes:
                    # they change at every call (a counter): eager from now on, not a capture a call
                    entry.attrs = None
                    entry.capture_error = entry.capture_error.replace(_AGAIN, "; they change at every call: "
                                                                      "it stays in PyTorch")
                self._stale.setdefault(key, []).append(before)
            self._cache[key] = entry
            if entry.keeps_state:
                self._keeps_state = entry
            if why:
                note = "" if state else "; compiled for these sizes only" + self._rejected_note()
                self.recompiles.append(why + note)
            return entry

    def _why_new(self, key) -> tuple[str, Optional[_Entry]]:
        """Why `key` is not served by a compile so far ("" for the first), and the static compile
        of the same argument structure whose sizes differ, if any (automatic dynamic's baseline)."""
        from .runtime.guards import varying_dims

        if not self._cache and not self._symbolic:
            return "", None
        for old_key, old in self._cache.items():
            diff = varying_dims(old_key, key)
            if diff:
                for i, dims in diff.items():
                    self._varying.setdefault(i, set()).update(d for d, _, _ in dims)
                what = ", ".join(f"input {i}{'' if key[1][i][0] == 'C' else f' dim {d}'}: {a} -> {b}"
                                 for i, dims in diff.items() for d, a, b in dims)
                return f"sizes changed ({what})", old
        if self._symbolic:
            return f"not served by the symbolic compile: {self._symbolic[-1][0].check(key)}", None
        return "a new input spec (structure, dtype, device or constant argument)", None

    def _state_changed(self, key) -> str:
        """Why a compile for these inputs no longer serves: the key's tag (train/eval flags,
        parameters, autocast) differs from an earlier compile's with the same inputs; else ""."""
        tree, mode = split_modes(key[0])
        for old_key in self._cache:
            old_tree, old_mode = split_modes(old_key[0])
            if old_tree == tree and old_key[1:] == key[1:] and old_mode != mode:
                (old_mode, old_amp), (mode, amp) = split_autocast(old_mode), split_autocast(mode)
                if old_amp != amp:
                    return f"autocast changed ({old_amp or 'off'} -> {amp or 'off'})"
                (old_mode, old_grad), (mode, grad) = split_grad(old_mode), split_grad(mode)
                if old_grad != grad:
                    return (f"grad mode changed ({old_grad} -> {grad}): nn.TransformerEncoder runs its nested "
                            f"fast path only without autograd")
                (old_mode, old_params), (mode, params) = split_params(old_mode), split_params(mode)
                if old_params != params:
                    return f"parameters changed (now {params.partition(' ')[2].strip('()') or 'as compiled first'}: " \
                           f"model.to(), .half() or parameters set anew)"
                return f"module modes changed ({old_mode} -> {mode}: model.train() or .eval())"
        return ""

    def _compile_symbolic(self, args, kwargs, key, why: str, baseline: Optional[_Entry]) -> Optional[_Entry]:
        """A compile whose sizes stay symbolic in the dims the policy picks (runtime/guards.py), or
        None when there are none, or the capture specialized them all, or (automatic dynamic) it
        compiles fewer ops than the static compile it would replace."""
        from .runtime.guards import SymbolicGuard, every_dim, marked_dims

        if self._dynamic is False:
            return None
        dims = marked_dims(args, kwargs)
        if self._dynamic is True:
            dims = every_dim(args, kwargs)
        elif baseline is not None:
            for i, ds in self._varying.items():
                dims.setdefault(i, set()).update(ds)
        if not dims:
            return None
        tried = frozenset((i, d) for i, ds in dims.items() for d in ds)
        if tried in self._rejected:
            held = self._held.get(tried)
            if held is None or held[0].check(key) is not None:
                return None
            guard, entry, n = held
            if n <= _STATIC_RECOMPILES:
                self._held[tried] = (guard, entry, n + 1)
                return None
            del self._held[tried], self._rejected[tried]
            why = (f"{why}; " if why else "") + f"{n} sizes compiled statically before"
            return self._keep_symbolic(guard, entry, dims, args, kwargs, why)
        try:
            entry = _compile_entry(self._model, args, kwargs, self._target, self._fallback, dynamic=dims,
                                   cuda_graphs=self._cuda_graphs, kernel_prefix=self.kernel_prefix, freeze=self._freeze)
            guard = SymbolicGuard.of(entry.captured, key) if entry.captured is not None else None
        except Exception as err:  # noqa: BLE001 - a bug of ours in the symbolic path: the static compile still serves
            if self._fallback == "error":
                raise
            self._rejected[tried] = f"the symbolic compile failed: {type(err).__name__}: {err}".splitlines()[0][:200]
            return None
        if guard is None or not guard.symbolic:
            self._rejected[tried] = "the capture kept every size static"
            return None
        if baseline is not None and self._dynamic is None:
            mine, theirs = _eager_ops(entry), _eager_ops(baseline)
            if mine > theirs:
                first = next((f.reason for f in entry.program.fallbacks), "")
                self._rejected[tried] = (f"with symbolic sizes {mine} ATen ops run eagerly, {theirs} with static ones"
                                         + (f" (first eager op: {first.splitlines()[0][:160]})" if first else ""))
                self._held[tried] = (guard, entry, 2)  # the first size's compile and this one's
                return None
        return self._keep_symbolic(guard, entry, dims, args, kwargs, why)

    def _keep_symbolic(self, guard, entry: _Entry, dims, args, kwargs, why: str) -> _Entry:
        from .runtime.size_one import dims_of

        entry.dynamic = dims
        # a dim seen at 1 before (batch 1, then batch 2): one compile serves both if it can
        seen_one = {sym for sym in guard.names for old in self._cache
                    if any(_size_in(old, i, d) == 1 for i, d in dims_of(guard, sym))}
        self._try_size_one(guard, entry, args, kwargs, seen_one)
        entry.symbols = guard.describe()
        self._symbolic.append((guard, entry))
        self.recompiles.append((f"{why}; " if why else "") + "compiled with symbolic sizes: " + "; ".join(entry.symbols))
        return entry

    def _try_size_one(self, guard, entry: _Entry, args, kwargs, symbols) -> list[str]:
        """Widens the guard of a symbolic compile to size 1 of each of `symbols` that it computes
        exactly as a compile for size 1 would (runtime/size_one.py); the symbols admitted."""
        from .runtime.size_one import serves_size_one

        admitted = []
        for sym in sorted(symbols):
            lo, hi = guard.ranges.get(sym, (2, None))
            if lo <= 1 or (sym, id(entry)) in self._not_one:
                continue
            why = serves_size_one(self._model, args, kwargs, entry.dynamic, guard, sym)
            if why is None:
                guard.ranges[sym] = (1, hi)
                admitted.append(sym)
            else:
                self._not_one[(sym, id(entry))] = why
        if admitted:
            entry.symbols = guard.describe()
        return admitted

    def _admit_ones(self, key, args, kwargs) -> Optional[_Entry]:
        """A symbolic compile that serves `key` once size 1 of its symbols is admitted, or None."""
        for guard, entry in self._symbolic:
            ones = guard.ones_below_range(key)
            if ones and self._try_size_one(guard, entry, args, kwargs, ones) and guard.check(key) is None:
                self.recompiles.append(f"size 1 of {', '.join(sorted(ones))} served by the symbolic compile "
                                       f"(its graph at 1 is the same program): no recompile")
                return entry
        return None

    def _rejected_note(self) -> str:
        return "".join(f" (symbolic sizes not kept: {w})" for w in list(self._rejected.values())[-1:])

    def __call__(self, *args, **kwargs):
        from .runtime.training import needs_autograd

        if torch.compiler.is_dynamo_compiling() or capturing():
            # inside a capture of a model holding this one (torch.compile's or uniorch's): traced
            # as the model, part of the outer graph
            return self._model(*args, **kwargs)
        if needs_autograd(self._model, args, kwargs):
            self._last[1] = None  # explain() reports the training path's graphs
            return self.training_compile(*args, **kwargs)
        entry = self.entry(args, kwargs)
        if args or kwargs:
            self._last[1] = (entry, self._last[0])
        if entry is None or entry.captured is None:
            if entry is not None and self._in_pieces(entry):
                out = self.training_compile(*args, **kwargs)
                if self._training.failure is None:  # not the model's own error: Dynamo serves this structure
                    self._routed.setdefault(self._last[0][0], entry)
                return out
            return self._model(*args, **kwargs)
        if torch.is_grad_enabled() and eval_grad.takes_training_path(self._model, entry.captured):
            return self.training_compile(*args, **kwargs)
        flat = entry.captured.flat_inputs(args, kwargs)
        outs = entry.program(*flat)
        try:  # eval mode with grad enabled: results require grad, as eager's (runtime/eval_grad.py)
            out = entry.captured.finish(args, kwargs, list(outs))
            return out if entry.captured.grad_free else eval_grad.attach(self._model, out, args, kwargs)
        except CheckFailed:  # a rewrite's run-time condition failed: eager gives the right answer
            return self._model(*args, **kwargs)

    _run = __call__

    def _in_pieces(self, entry: _Entry) -> bool:
        """Whether a call export could not capture runs through Dynamo, which splits the model where
        it must and hands uniorch each graph, as torch.compile would: a branch on a tensor's value,
        a forward keeping tensors on its modules (whose writes export drops), `torch.vmap` over a
        parameter, NumPy. A model that raised raises again there, its own error."""
        return (entry.captured is None and (entry.export_failed or entry.keeps_state)
                and not isinstance(self._model, torch.fx.GraphModule))

    @property
    def training_compile(self):
        """The training path (runtime/training.py): forward and backward graphs from AOTAutograd,
        each compiled by uniorch; used for calls that autograd must record."""
        if self._training is None:
            from .runtime.training import TrainingCompile

            self._training = TrainingCompile(self._model, self._target, self._fallback, self._limit, self._dynamic,
                                             recompiles=self.recompiles)
        return self._training

    @property
    def cache_size(self) -> int:
        """Compiles held: one per static input spec, one per symbolic compile, one per earlier
        value of the model's attributes."""
        return (len(self._cache) + len(self._symbolic) + sum(map(len, self._stale.values()))
                + sum(inner.cache_size for inner in self._inner.values()))

    def generate(self, *args, **kwargs):
        """`model.generate(...)` (transformers) with every forward call, the prefill and each decode
        step, running through a compiled module; the same arguments and result as the model's.
        A wrapper that hands generate to a model inside it (peft's PeftModel) compiles that model,
        and an encoder-decoder's encoder is compiled on its own (uniorch/generation.py);
        `explain()` reports the loop's last call."""
        from .generation import decoding_module, encoder_of, generate_through

        model = self._model
        if not hasattr(model, "generate"):
            raise AttributeError(f"{type(model).__name__} has no generate()")
        runner = decoding_module(model)
        loop = self if runner is model else self._compile_of(runner)
        swaps = [(runner, loop)]
        encoder = encoder_of(runner)
        if encoder is not None:
            swaps.insert(0, (encoder, self._compile_of(encoder)))
        try:
            return generate_through(model, swaps, args, kwargs)
        finally:
            if loop is not self and loop._last[1] is not None:
                self._last[1] = loop._last[1]

    def _compile_of(self, module) -> "CompiledModule":
        """A compile of a module inside the model, with this one's options (generation.py)."""
        inner = self._inner.get(id(module))
        if inner is None or inner._model is not module:
            inner = self._inner[id(module)] = CompiledModule(module, self._target, self._fallback, self._limit,
                                                             dynamic=self._dynamic, cuda_graphs=self._cuda_graphs)
            inner.kernel_prefix = self.kernel_prefix
        return inner

    def explain(self, *args, **kwargs) -> "Report":
        """The report for this input spec (compiling it first if needed); with no arguments, that of the
        last call made with some (`cm(x); cm.explain()`). For a call autograd must record (training),
        the report of the forward graphs the last training call ran (several when Dynamo broke the model
        into pieces: `graph_breaks` says why), with the backward graphs' as `.backward`."""
        from .runtime.training import eager_saved_activation_bytes, needs_autograd

        if not args and not kwargs and self._last[1] is None and _takes_inputs(self._model) and not (
                self._training is not None and (self._training.forward or self._training.failure)):
            # compiling for no inputs would report a capture failure of the model's own making
            raise TypeError(f"explain() with no inputs reports the last call made with some, and "
                            f"{type(self._model).__name__} has not been called yet: pass its inputs, "
                            f"explain(*args, **kwargs), or call it first")
        if not args and not kwargs and self._last[1] is not None and self._last[1][0] is not None:
            entry, key = self._last[1]  # the last call, an inference one
            if self._in_pieces(entry):
                return self._pieces_report(entry, args, kwargs)
            rep = _report(entry, self._target, None, None, spec=key, freeze=self._freeze)
            rep.recompiles = list(self.recompiles)
            return rep
        if needs_autograd(self._model, args, kwargs):
            tc = self.training_compile
            if not tc.forward and tc.failure is None:
                tc(*args, **kwargs)
            if not tc.forward:
                rep = _report(_Entry(None, None, {}, f"training path: {tc.failure}"), self._target, args, kwargs)
                rep.backward = None
                return rep
            backward = list(dict.fromkeys(tc.ran_backward)) or tc.backward[-1:]
            rep = tc.forward_report()
            rep.recompiles = list(self.recompiles)  # Dynamo's retraces of the training path among them
            rep.backward = merged_report([tc.report(h) for h in backward]) if backward else None
            if backward:
                rep.saved_bytes = sum(tc.saved.get(id(h), 0) for h in backward)
                if args or kwargs:  # eager's count runs the model on them
                    rep.eager_saved_bytes = eager_saved_activation_bytes(self._model, args, kwargs)
            return rep
        with trials_on_interpreter():  # a kernel the interpreter rejects is reported now, by name
            entry = self.entry(args, kwargs)
            if entry is None and self.cache_size >= self._limit:  # what the call does: PyTorch runs it
                return _report(_Entry(None, None, {}, f"limit reached. {_LIMIT_HINT}"), self._target, args, kwargs)
            entry = entry or _compile_entry(
                self._model, args, kwargs, self._target, self._fallback, cuda_graphs=self._cuda_graphs,
                kernel_prefix=self.kernel_prefix, freeze=self._freeze)
        if self._in_pieces(entry):
            return self._pieces_report(entry, args, kwargs)
        rep = _report(entry, self._target, args, kwargs, freeze=self._freeze)
        rep.recompiles = list(self.recompiles)
        return rep

    def _pieces_report(self, entry: _Entry, args: tuple, kwargs: dict) -> "Report":
        """The report of a call Dynamo split (`_in_pieces`): the graphs its last call ran (this
        call runs first if none has), why export failed, and where Dynamo broke the model."""
        tc = self.training_compile
        whole = f"export could not capture the whole model ({entry.capture_error.splitlines()[0][:300]})"
        if not tc.ran_forward and tc.failure is None:
            try:
                tc(*args, **kwargs)
            except Exception as err:  # noqa: BLE001 - the model's own error: eager raises it too
                return _report(_Entry(None, None, {}, f"{whole}; the model raised {type(err).__name__}: "
                                      f"{str(err).splitlines()[0][:200]}"), self._target, args, kwargs)
        if not tc.forward:
            return _report(_Entry(None, None, {}, f"{whole}; Dynamo: {tc.failure}"), self._target, args, kwargs)
        rep = tc.forward_report()
        rep.capture_note, rep.recompiles = whole, list(self.recompiles)
        return rep


class CompiledModel(ModuleFacade, CompiledModule):
    """What `uniorch.compile` returns for an nn.Module: an nn.Module itself (uniorch/compiled_nn.py),
    called like the model and compiled once per input spec."""

    def __init__(self, model: torch.nn.Module, *args, **kwargs):
        ModuleFacade.__init__(self, model)
        CompiledModule.__init__(self, model, *args, **kwargs)
        self._finish_facade(model)


def _takes_inputs(model) -> bool:
    """Whether the model's forward (or the function) has parameters at all."""
    import inspect
    if isinstance(model, torch.fx.GraphModule):  # its forward reads `*args` once recompiled lazily
        return any(n.op == "placeholder" for n in model.graph.nodes)
    try:
        return bool(inspect.signature(model.forward if isinstance(model, torch.nn.Module) else model).parameters)
    except (TypeError, ValueError):  # a builtin without a signature
        return True


def _rebuild(cls, model, target, fallback, limit, dynamic, cuda_graphs, kernel_prefix, freeze=False):
    compiled = cls(model, target, fallback, limit, dynamic=dynamic, cuda_graphs=cuda_graphs, freeze=freeze)
    compiled.kernel_prefix = kernel_prefix
    return compiled


def _check_devices(args: tuple, kwargs: dict, target: Target) -> None:
    """Kernels of a target run on its device only; a tensor elsewhere is the caller's mistake, and
    saying so beats a crash inside a kernel launch."""
    from .errors import UniorchError

    want = target.backend.device_type
    paths, _ = pytree.tree_flatten_with_path((args, kwargs))
    for path, leaf in paths:
        if isinstance(leaf, torch.Tensor) and leaf.device.type != want:
            where = pytree.keystr(path)
            raise UniorchError(f"input {where} is on device '{leaf.device}', but target '{target}' runs kernels on "
                               f"'{want}'; move the inputs there, or compile for a target of that device")


_AGAIN = "; it is captured again when the values it read change"


def _compile_entry(model, args, kwargs, target: Target, fallback: str, launch: bool = True,
                   dynamic: Optional[dict] = None, cuda_graphs: bool = False, kernel_prefix: str = "",
                   freeze: bool = False) -> _Entry:
    """`launch=False` stops each region after codegen: no kernel is loaded or trial-launched.
    `dynamic`: flat argument index -> dims captured with symbolic sizes. `cuda_graphs`: regions
    replay their launches as CUDA graphs where they can (runtime/cuda_graphs.py). `freeze`: what
    reads weights alone runs once, outside the kernels (runtime/weight_folding.py)."""
    from .errors import AttributeWriteError, CaptureError, StateWriteError

    timings = {}
    t = time.perf_counter()
    try:
        try:
            captured = capture(model, args, kwargs, dynamic=dynamic)
        except AttributeWriteError as err:
            if not err.lazy_init:
                raise
            # a lazy initialisation (transformers installs its output-capturing hooks and sets
            # `_output_capturing_hooks_installed` at the first call): the trace ran it on the
            # model, so a second trace finds it done and writes nothing
            captured = capture(model, args, kwargs, dynamic=dynamic)
    except AttributeWriteError as err:
        if fallback == "error":
            raise
        # eager runs the writes; once the values the trace read change (a lazy initialisation's
        # flag set), the guard fails and the next call captures again
        from .capture.attribute_guard import attribute_guard

        return _Entry(None, None, {"capture": time.perf_counter() - t}, str(err) + _AGAIN, sets_attributes=True,
                      attrs=attribute_guard(model, err.reads))
    except StateWriteError as err:
        if fallback == "error":
            raise
        return _Entry(None, None, {"capture": time.perf_counter() - t}, str(err), keeps_state=True)
    except CaptureError as err:
        if fallback == "error":
            raise
        return _Entry(None, None, {"capture": time.perf_counter() - t}, str(err), export_failed=True)
    timings["capture"] = time.perf_counter() - t
    t = time.perf_counter()
    region = None
    if not launch:
        from .runtime.compiler import compile_graph

        region = functools.partial(compile_graph, run=False)
    fold = weight_folding.split(captured, captured.flat_inputs(args, kwargs)) if freeze else None
    program = compile_program(fold.main if fold else captured.graph_module, target, fallback,
                              compile_region=region, kernel_prefix=kernel_prefix)
    if fold is not None:
        program.prelude, program.folded_nodes = fold, fold.nodes
    writes = program_writes(program, captured.mutated_inputs())
    if cuda_graphs and launch:
        from .runtime.cuda_graphs import attach

        attach(program)
    timings["compile"] = time.perf_counter() - t
    timings.update({f"  {k}": v for k, v in program.timings.items()})
    from .capture.attribute_guard import attribute_guard

    return _Entry(captured, program, timings, writes=writes, attrs=attribute_guard(model, captured.attribute_reads))


def compile(model_or_fn: Any, target: str = "auto", *, fallback: str = "eager",
            cache_size_limit: int = DEFAULT_CACHE_LIMIT, dynamic: Optional[bool] = None,
            cuda_graphs: bool = False, freeze: bool = False) -> CompiledModule:
    """Returns a callable with the model's signature and outputs, running uniorch's kernels; for
    an nn.Module, an nn.Module (`CompiledModel`, as torch.compile's OptimizedModule: the model is
    its `_orig_mod`; its state dict keeps the model's own keys).

    model_or_fn: an nn.Module, a function of tensors, or an ONNX model (a .onnx path or an
    onnx.ModelProto; it is then called with the graph's inputs, positionally or by name); or a
    torch.optim optimizer or its `step` (runtime/optimizer.py: each group's update as kernels).
    target: "auto" | "interpret" | "cuda[:sm_XX]" | "rocm[:gfxNNN]" | "cann[:…]" (docs/design.md).
    fallback: "eager" runs what cannot be compiled in PyTorch (reported by `explain`);
    "error" raises instead. The first call per input spec (shapes, dtypes, devices, constant
    arguments) captures and compiles; later calls with that spec reuse it.
    dynamic: as torch.compile's. None: when a call differs from a compiled one only in sizes,
    those dims are tried symbolic (one compile for every size; kept when it leaves no more ops
    to PyTorch than the static compile); True: every dim symbolic from the first call; False: never.
    `torch._dynamo.mark_dynamic(t, d)` makes a dim symbolic from the first call. `explain` lists
    the symbolic sizes and why each recompile happened.
    cuda_graphs: from the second call, each compiled region's launches replay as one CUDA graph
    (as torch.compile's mode="reduce-overhead"; runtime/cuda_graphs.py): inputs are copied into
    the graph's buffers unless they stay at one address, and outputs are copies, so they outlive
    later calls. Regions with random ops, symbolic sizes or CPU inputs launch as without it.
    freeze: the model's parameters and buffers are constants between in-place updates (as for
    Inductor's `freezing`): what the graph computes from them alone (autocast's weight casts, weight
    norm, an eval BatchNorm's scale) runs once, in PyTorch (runtime/weight_folding.py), and a
    convolution's filters are copied channels-last once (runtime/frozen_layouts.py); both again
    after an update their version counter sees (an optimizer step, load_state_dict).
    """
    if fallback not in ("eager", "error"):
        raise ValueError(f"fallback must be 'eager' or 'error', not {fallback!r}")
    tgt = parse_target(target)
    require_runnable(tgt)
    from .frontends.onnx import is_onnx

    if is_onnx(model_or_fn):  # a .onnx path or an onnx.ModelProto
        from .frontends.onnx_model import OnnxModel

        return OnnxModel(model_or_fn, tgt, fallback)
    from .runtime.optimizer import compile_step, optimizer_of_step

    optimizer = optimizer_of_step(model_or_fn)
    if isinstance(model_or_fn, torch.optim.Optimizer) or optimizer is not None:
        compiled = compile_step(optimizer or model_or_fn, tgt, fallback, cache_size_limit)
        return compiled if optimizer is None else compiled.step
    if dynamic not in (None, True, False):
        raise ValueError(f"dynamic must be None, True or False, not {dynamic!r}")
    if isinstance(model_or_fn, CompiledModule):  # compiled again (other options): the model anew
        model_or_fn = model_or_fn._model
    cls = CompiledModel if isinstance(model_or_fn, torch.nn.Module) else CompiledModule
    return cls(model_or_fn, tgt, fallback, cache_size_limit, dynamic, cuda_graphs, freeze)


# -- explain ---------------------------------------------------------------------------------------
def explain(model_or_fn: Any, *args, target: str = "auto", **kwargs) -> Report:
    """Compiles for `args`/`kwargs` and reports kernels, fallbacks, timings and bytes moved."""
    return compile(model_or_fn, target=target).explain(*args, **kwargs)


def explain_static(model_or_fn: Any, args: Any = (), kwargs: Optional[dict] = None, target: str = "interpret",
                   fallback: str = "eager", freeze: bool = False) -> Report:
    """`explain` without loading or launching a kernel: capture, passes and codegen only, so it is
    fast on the interpreter and works for any target (`cuda:sm_90` on a machine without a GPU).
    A kernel that Triton would reject at its first launch is not found, so `explain` can report
    more fallbacks; bytes and kernels are those `explain` reports otherwise (`freeze`: as for a
    model compiled with freeze=True, parameters' layout copies not counted)."""
    tgt = parse_target(target)
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    kwargs = dict(kwargs or {})
    return _report(_compile_entry(model_or_fn, args, kwargs, tgt, fallback, launch=False, freeze=freeze), tgt,
                   args, kwargs, freeze=freeze)


BACKEND_OPTIONS = ("target", "fallback", "cache_size_limit", "cuda_graphs", "freeze")


def torch_backend(gm: torch.fx.GraphModule, example_inputs: list, *, options: dict | None = None,
                  mode: str | None = None, **kwargs):
    """torch.compile(model, backend="uniorch", options={...}): Dynamo's graph is compiled like any
    function, with `uniorch.compile`'s keywords (target, fallback, cache_size_limit, cuda_graphs,
    freeze) as options.

    Registered through the `torch_dynamo_backends` entry point. torch.compile passes its `options=`
    dict as one keyword, and `mode=` when given: "reduce-overhead" means CUDA graphs, as for
    Inductor (`cuda_graphs=True`); Inductor's tuning modes have nothing to do here. A key uniorch
    does not know is an error naming it, not a silently ignored setting.
    """
    opts = {**(options or {}), **kwargs}
    if mode == "reduce-overhead":
        opts.setdefault("cuda_graphs", True)
    if opts.get("freeze"):  # Dynamo lifts the module's parameters as the graph's inputs
        frozen_layouts.register(t for t in example_inputs if isinstance(t, torch.nn.Parameter))
    unknown = sorted(k for k in opts if k not in BACKEND_OPTIONS)
    if unknown:
        raise ValueError(f"torch.compile(backend='uniorch'): unknown option(s) {', '.join(map(repr, unknown))}; "
                         f"known: {', '.join(BACKEND_OPTIONS)}")
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs):
        # training: Dynamo lifted the parameters as inputs; AOTAutograd splits forward and backward
        from .runtime.training import backend_for_dynamo

        cm = compile(gm, **opts)
        return backend_for_dynamo(gm, example_inputs, cm.target, cm._fallback, cm._limit)
    # Dynamo passes real example tensors; its placeholders' values say which sizes are symbolic
    values = [n.meta.get("example_value", n.meta.get("val")) for n in gm.graph.nodes if n.op == "placeholder"]
    def symbolic(v) -> bool:
        return isinstance(v, torch.SymInt) or (isinstance(v, torch.Tensor) and not all(isinstance(n, int) for n in v.shape))

    if len(values) == len(example_inputs) and any(symbolic(v) for v in values):
        return _symbolic_graph(gm, values, opts)
    return compile(gm, **opts)


def _symbolic_graph(gm: torch.fx.GraphModule, example_inputs: list, opts: dict):
    """A graph Dynamo made symbolic (a second image size, sequence length) compiles symbolic at
    once, as the training path's halves do (runtime/symbolic_halves.py): its size arguments are
    read from the tensors and the dims Dynamo made symbolic are marked on the first call's inputs
    (on aliases: the caller's tensors stay unmarked). Compiled as any graph, it went static first
    and compiled again per size: a size already served cost 25 s in HF ConvNeXt."""
    import copy

    from .runtime.symbolic_halves import mark_symbolic, sizes_from_tensors

    # a copy: Dynamo reads the arguments it passes off its own graph's placeholders
    own = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    sizes = sizes_from_tensors(own, example_inputs)
    if sizes is None:
        return compile(gm, **opts)
    cm = compile(own, **opts)
    first = [True]

    def run(*args):
        args = sizes.arguments(args)
        if first[0]:
            first[0] = False
            args = [a.view_as(a) if isinstance(a, torch.Tensor) else a for a in args]
            mark_symbolic(args, sizes)
        out = cm(*args)
        if not sizes.returned:
            return out
        return sizes.results(args, out if isinstance(out, (tuple, list)) else (out,))

    run.compiled = cm  # explain() and recompiles of the graph
    return run


__all__ = ["compile", "explain", "CompiledModule", "Report", "torch_backend"]
