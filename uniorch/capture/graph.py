"""The captured program: a functional core-ATen FX graph plus how to feed it and unpack it."""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.utils._pytree as pytree

from uniorch.runtime.sizes import restore_sizes

from uniorch.runtime.boundary import as_complex, as_pair, bounded, int_rows, laid_out, verify
from .aliases import Aliases, leaves_as_inputs, objects_as_inputs
from .locations import SourceLoc, node_source_loc


@dataclass(frozen=True)
class GraphInput:
    """One placeholder of the graph, in order. `kind` says where its value comes from at call time."""

    kind: str  # "parameter" | "buffer" | "constant" | "user"
    name: str  # placeholder name
    target: Any = None  # fqn for parameter/buffer/constant; flat user-argument index for "user"
    complex_dtype: Any = None  # a complex input, fed to the graph as its real pairs (view_as_real)
    int_rows: bool = False  # an int argument fed as an (n, 0) tensor: a symbolic size (int_sizes.py)


@dataclass(frozen=True)
class GraphOutput:
    kind: str  # "user" | "buffer_mutation" | "parameter_mutation" | "user_input_mutation" | "check"
    target: Any = None  # buffer fqn, or flat user-argument index, or flat user-output index, or a check's spec
    complex_dtype: Any = None  # a complex output, computed as real pairs (view_as_complex restores it)
    read: Any = None  # "item": a Python scalar; ("narrow", dim, i): trimmed to the count in output i
    layout: Any = None  # (stride, storage offset) eager gives this output when not contiguous
    # eager returns a view of a graph input: (the GraphInputs it reads, a GraphModule replaying
    # eager's view ops on them); the boundary returns that view of the caller's tensor
    view_of: Any = None


@dataclass(frozen=True)
class CapturedOp:
    node: str
    target: str  # "aten.mm.default"
    loc: SourceLoc


# argument types pytree takes as leaves: a call of only these flattens to its own arguments
_LEAVES = (torch.Tensor, int, float, bool, str)


@dataclass
class CapturedGraph:
    """A model as uniorch sees it after capture.

    `graph_module` is functional (no in-place or view-mutating ops) and holds only core ATen ops.
    Parameters, buffers and lifted tensor constants are graph inputs, read from the module at every
    call, so a weight updated after capture is used, never a stale copy. Non-tensor arguments are
    constants of the capture (recorded in `constant_args`, a guard for later runs).
    """

    graph_module: torch.fx.GraphModule
    inputs: list[GraphInput]
    outputs: list[GraphOutput]
    in_spec: pytree.TreeSpec
    out_spec: pytree.TreeSpec
    constant_args: dict[int, Any]  # flat user-argument index -> value baked into the graph
    module: torch.nn.Module
    constants: dict[str, Any] = field(default_factory=dict)  # lifted tensor constants by fqn
    name: str = "main"
    aliases: Aliases = field(default_factory=Aliases)  # outputs that are input objects (capture/aliases.py)
    # (id(obj), name) -> (obj, name, value): plain values the trace read from the model (capture/attribute_guard.py)
    attribute_reads: dict = field(default_factory=dict)
    symbol_ranges: dict = field(default_factory=dict)  # size symbol -> (low, high or None): export's ranges
    # export's guards relating size symbols (runtime/size_guards.py): (kept (op, lhs, rhs), unreadable)
    size_guards: tuple = ((), ())
    grad_free: bool = False  # every output computed with grad disabled (a @torch.no_grad() forward)

    # -- what was captured --------------------------------------------------------------------
    @property
    def ops(self) -> list[CapturedOp]:
        return [
            CapturedOp(n.name, _target_name(n.target), node_source_loc(n))
            for n in self.graph_module.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
        ]

    @property
    def checks(self) -> list[dict]:
        return [o.target for o in self.outputs if o.kind == "check"]

    def mutated_inputs(self) -> list[tuple[int, int]]:
        """(output index, input index) for each state update: the output is the new value of that
        graph input (a buffer, or a user argument the model writes into). Complex inputs, fed as
        real pairs, are left out: their update is always a copy."""
        where = {}
        for i, inp in enumerate(self.inputs):
            if inp.complex_dtype is None and inp.kind in ("buffer", "parameter", "user"):
                where[(inp.kind, inp.target)] = i
        pairs = []
        for j, out in enumerate(self.outputs):
            kind = {"buffer_mutation": "buffer", "parameter_mutation": "parameter",
                    "user_input_mutation": "user"}.get(out.kind)
            if kind is not None and out.complex_dtype is None and (kind, out.target) in where:
                pairs.append((j, where[(kind, out.target)]))
        return pairs

    @property
    def num_user_outputs(self) -> int:
        return sum(o.kind == "user" for o in self.outputs)

    # -- feeding and unpacking ------------------------------------------------------------------
    def flat_inputs(self, args: tuple, kwargs: Optional[dict] = None) -> list[Any]:
        # the common calls, positional tensors and numbers (and an optimizer's lists of tensors),
        # skip pytree (a few microseconds a call on a GPU, where a whole small kernel takes tens)
        flat = None if kwargs else self._shallow_flat(args)
        if flat is None:
            flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs or {})))
            if spec != self.in_spec:
                raise TypeError(f"inputs have structure {spec}, but the capture expects {self.in_spec}")
        module, constants = self.module, self.constants
        readers, complex_inputs = self._readers_of_inputs()
        values = [read(module, flat, constants) for read in readers]
        if complex_inputs:
            values = [as_pair(v) if inp.complex_dtype is not None else v for inp, v in zip(self.inputs, values)]
        return values

    def _shallow_flat(self, args: tuple):
        """`args` flattened, where each is a leaf (a tensor, a number, a string) or a list or tuple
        of tensors (an optimizer's parameters, gradients and states) and that is the capture's
        input structure (checked once per such shape); else None. pytree's flatten and spec
        comparison of 60 tensors in lists took 0.3 ms a step."""
        shape = []
        nested = False
        for a in args:
            if isinstance(a, _LEAVES):
                shape.append(None)
            elif type(a) in (list, tuple) and all(isinstance(t, torch.Tensor) for t in a):
                shape.append((type(a), len(a)))
                nested = True
            else:
                return None
        known = self.__dict__.setdefault("_shallow_specs", {})
        key = tuple(shape)
        ok = known.get(key)
        if ok is None:
            ok = known[key] = pytree.tree_flatten((tuple(args), {}))[1] == self.in_spec
        if not ok:
            return None
        return [t for a in args for t in (a if type(a) in (list, tuple) else (a,))] if nested else args

    def _readers_of_inputs(self) -> tuple[list, bool]:
        """(per graph input `(module, flat user args, constants) -> value`, whether any input is
        complex). A parameter or buffer is read from the module at every call (by its path, so a
        weight reassigned after capture is the one read), through the modules' own dicts:
        `nn.Module.__getattr__` per path part cost a BERT layer 90 us a call on this CPU."""
        ids = tuple(map(id, self.inputs))  # rewrites may replace inputs after a first call
        cached = self.__dict__.get("_readers")
        if cached is None or cached[0] != ids:
            cached = (ids, [_input_reader(i) for i in self.inputs],
                      any(i.complex_dtype is not None for i in self.inputs))
            self.__dict__["_readers"] = cached
        return cached[1], cached[2]

    def finish(self, args: tuple, kwargs: Optional[dict], flat_outputs: list[Any]) -> Any:
        """Apply state updates (buffer and input mutations) and rebuild the user's output structure."""
        ids = tuple(map(id, self.outputs))  # rewrites may replace outputs after a first call
        cached = self.__dict__.get("_plain_outputs")
        if cached is None or cached[0] != ids:
            cached = self.__dict__["_plain_outputs"] = (ids, self._plain_output_shape())
        plain = cached[1]
        if plain == "leaf":  # the common results, rebuilt without pytree
            return flat_outputs[0]
        if plain == "tuple":
            return tuple(flat_outputs)
        for spec, value in zip(self.outputs, flat_outputs):  # before any state changes
            if spec.kind == "check":
                verify(spec.target, value)
        flat_outputs = bounded(self.outputs, [as_complex(v) if o.complex_dtype is not None else v
                                              for o, v in zip(self.outputs, flat_outputs)])
        kinds = {o.kind for o in self.outputs}
        views = any(o.view_of is not None for o in self.outputs)
        user_flat = (pytree.tree_leaves((tuple(args), dict(kwargs or {})))
                     if "user_input_mutation" in kinds or self.aliases.leaves or views else None)
        state = _module_state(self.module, kinds)
        user_out, copies = [], []
        with torch.no_grad():
            for spec, value in zip(self.outputs, flat_outputs):
                if spec.kind in ("buffer_mutation", "parameter_mutation"):
                    _write_back(state[spec.target], value, copies)
                elif spec.kind == "user_input_mutation":
                    _write_back(user_flat[spec.target], value, copies)
                elif spec.kind == "user":  # "size" outputs only served to trim others
                    user_out.append(value if spec.layout is None or spec.view_of is not None
                                    else laid_out(value, spec.layout))
            _copy_all(copies)
        if views:  # in the caller's grad mode: a view of an input that requires grad does too, as in eager
            user_specs = [o for o in self.outputs if o.kind == "user"]
            for j, spec in enumerate(user_specs):
                if spec.view_of is not None:
                    view = self._input_view(spec.view_of, user_out[j], user_flat)
                    user_out[j] = view if view is not None else user_out[j] if spec.layout is None \
                        else laid_out(user_out[j].detach(), spec.layout)
        user_out = leaves_as_inputs(self.aliases, user_out, user_flat)
        out = restore_sizes(pytree.tree_unflatten(user_out, self.out_spec), self.out_spec)
        return objects_as_inputs(self.aliases, out, (tuple(args), dict(kwargs or {})))

    def _input_view(self, view_of, value, user_flat):
        """Eager's view of a graph input (capture/input_views.py), replayed on the caller's tensors:
        a write through it reaches the input, as in eager. The graph's writes into that input are
        copied through its own storage, so the view sees them. None (the computed copy is
        returned) where the replay does not give the computed value's shape and dtype."""
        inputs, replay = view_of
        view = replay(*[_input_reader(i)(self.module, user_flat, self.constants) for i in inputs])
        if not isinstance(view, torch.Tensor) or view.shape != value.shape or view.dtype != value.dtype:
            return None
        return view

    def _plain_output_shape(self) -> str:
        """"leaf" or "tuple" where the outputs are the user's tensors as computed (no state update,
        check, trim, layout, complex pair or alias) in one tensor or a plain tuple; else ""."""
        if self.aliases.leaves or self.aliases.objects or any(
                o.kind != "user" or o.layout is not None or o.complex_dtype is not None or o.read
                or o.view_of is not None for o in self.outputs):
            return ""
        spec = self.out_spec
        if spec.is_leaf() and len(self.outputs) == 1:
            return "leaf"
        if spec.type is tuple and len(spec.children()) == len(self.outputs) \
                and all(c.is_leaf() for c in spec.children()):
            return "tuple"
        return ""

    def run_eager(self, *args, **kwargs) -> Any:
        """Runs the captured graph op by op in PyTorch: the reference every compiled form must match."""
        flat_out = self.graph_module(*self.flat_inputs(args, kwargs))
        return self.finish(args, kwargs, list(flat_out))

    def __call__(self, *args, **kwargs):
        return self.run_eager(*args, **kwargs)


def _input_reader(inp) -> Callable:
    if inp.kind == "constant":
        name = inp.target
        return lambda module, flat, constants: constants[name]
    if inp.kind not in ("parameter", "buffer"):
        index = inp.target
        if inp.int_rows:  # on the device of the tensors beside it: the launch plan reads its rows
            return lambda module, flat, constants: int_rows(
                flat[index], next((t.device for t in flat if isinstance(t, torch.Tensor)), None))
        return lambda module, flat, constants: flat[index]
    *path, leaf = inp.target.split(".")
    table = "_parameters" if inp.kind == "parameter" else "_buffers"
    slow = operator.attrgetter(inp.target)

    def read(root, flat, constants):
        module = root
        try:
            for part in path:
                module = module._modules[part]
            value = getattr(module, table)[leaf]
        except (KeyError, AttributeError):
            value = None
        # not registered where captured (a parametrization, a plain tensor attribute, a parameter
        # made a buffer): the attribute, as the model itself would read it
        return value if value is not None else slow(root)

    return read


def _write_back(dest: torch.Tensor, value: torch.Tensor, copies: list) -> None:
    """A state update: a copy (added to `copies`), unless the kernel wrote the new value into
    `dest` itself (runtime/inplace.py); then only its version counter moves, as an in-place op's
    would, so autograd still sees a tensor it saved being modified."""
    if value is dest:
        torch.autograd.graph.increment_version(dest)
    else:
        copies.append((dest, value))


def _copy_all(copies: list) -> None:
    """The state updates' copies, as one `_foreach_copy_` where there are several: an optimizer
    step's 0-d step counts (one per parameter, read by every program of the update kernel, so not
    written in place) were a copy_ call and a kernel launch each, per step. One at a time where a
    new value shares memory with a destination, whose copies' order then matters."""
    if not copies:
        return
    if len(copies) == 1:
        copies[0][0].copy_(copies[0][1])
        return
    dests = {d.untyped_storage().data_ptr() for d, _ in copies}
    if any(v.untyped_storage().data_ptr() in dests for _, v in copies) or len(dests) < len(copies):
        for dest, value in copies:
            dest.copy_(value)
        return
    torch._foreach_copy_([d for d, _ in copies], [v for _, v in copies])


def _target_name(target: Callable) -> str:
    name = str(target)
    return name if name.startswith("aten.") else getattr(target, "__name__", name)


def _module_state(module, kinds: set) -> dict | None:
    """The buffers and parameters a call's state updates write, by name (None when it has none)."""
    state = None
    if "buffer_mutation" in kinds:
        state = dict(module.named_buffers(remove_duplicate=False))
    if "parameter_mutation" in kinds:
        state = {**(state or {}), **dict(module.named_parameters(remove_duplicate=False))}
    return state
