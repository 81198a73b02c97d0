"""The captured program: a functional core-ATen FX graph plus how to feed it and unpack it."""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.utils._pytree as pytree

from uniorch.runtime.sizes import restore_sizes

from uniorch.runtime.boundary import as_complex, as_pair, bounded, laid_out, verify
from .aliases import Aliases, leaves_as_inputs, objects_as_inputs
from .locations import SourceLoc, node_source_loc


@dataclass(frozen=True)
class GraphInput:
    """One placeholder of the graph, in order. `kind` says where its value comes from at call time."""

    kind: str  # "parameter" | "buffer" | "constant" | "user"
    name: str  # placeholder name
    target: Any = None  # fqn for parameter/buffer/constant; flat user-argument index for "user"
    complex_dtype: Any = None  # a complex input, fed to the graph as its real pairs (view_as_real)


@dataclass(frozen=True)
class GraphOutput:
    kind: str  # "user" | "buffer_mutation" | "user_input_mutation" | "check"
    target: Any = None  # buffer fqn, or flat user-argument index, or flat user-output index, or a check's spec
    complex_dtype: Any = None  # a complex output, computed as real pairs (view_as_complex restores it)
    read: Any = None  # "item": a Python scalar; ("narrow", dim, i): trimmed to the count in output i
    layout: Any = None  # (stride, storage offset) eager gives this output when not contiguous


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
    symbol_ranges: dict = field(default_factory=dict)  # size symbol -> (low, high or None): export's ranges

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

    @property
    def num_user_outputs(self) -> int:
        return sum(o.kind == "user" for o in self.outputs)

    # -- feeding and unpacking ------------------------------------------------------------------
    def flat_inputs(self, args: tuple, kwargs: Optional[dict] = None) -> list[Any]:
        # the common call, positional tensors and numbers, skips pytree (a few microseconds a call
        # on a GPU, where a whole small kernel takes tens)
        if not kwargs and self._flat_positional(args):
            flat = args
        else:
            flat, spec = pytree.tree_flatten((tuple(args), dict(kwargs or {})))
            if spec != self.in_spec:
                raise TypeError(f"inputs have structure {spec}, but the capture expects {self.in_spec}")
        readers = self._state_readers()
        values = []
        for inp, read in zip(self.inputs, readers):
            if read is not None:  # a parameter or buffer, read from the module at every call
                values.append(read(self.module))
            elif inp.kind == "constant":
                values.append(self.constants[inp.target])
            else:
                values.append(flat[inp.target])
            if inp.complex_dtype is not None:
                values[-1] = as_pair(values[-1])
        return values

    def _flat_positional(self, args: tuple) -> bool:
        """Whether `args` (no kwargs) flatten to themselves under the capture's input structure."""
        if not all(isinstance(a, _LEAVES) for a in args):
            return False
        known = self.__dict__.setdefault("_positional_specs", {})
        n = len(args)
        if n not in known:
            known[n] = pytree.tree_flatten((tuple(range(n)), {}))[1] == self.in_spec
        return known[n]

    def _state_readers(self) -> list:
        """Per graph input, a getter of its parameter or buffer from the module (by attribute path,
        so a weight reassigned after capture is the one read), else None."""
        ids = tuple(map(id, self.inputs))  # rewrites may replace inputs after a first call
        cached = self.__dict__.get("_readers")
        if cached is None or cached[0] != ids:
            cached = (ids, [operator.attrgetter(i.target) if i.kind in ("parameter", "buffer") else None
                            for i in self.inputs])
            self.__dict__["_readers"] = cached
        return cached[1]

    def finish(self, args: tuple, kwargs: Optional[dict], flat_outputs: list[Any]) -> Any:
        """Apply state updates (buffer and input mutations) and rebuild the user's output structure."""
        for spec, value in zip(self.outputs, flat_outputs):  # before any state changes
            if spec.kind == "check":
                verify(spec.target, value)
        flat_outputs = bounded(self.outputs, [as_complex(v) if o.complex_dtype is not None else v
                                              for o, v in zip(self.outputs, flat_outputs)])
        kinds = {o.kind for o in self.outputs}
        user_flat = (pytree.tree_leaves((tuple(args), dict(kwargs or {})))
                     if "user_input_mutation" in kinds or self.aliases.leaves else None)
        buffers = dict(self.module.named_buffers(remove_duplicate=False)) if "buffer_mutation" in kinds else None
        user_out = []
        with torch.no_grad():
            for spec, value in zip(self.outputs, flat_outputs):
                if spec.kind == "buffer_mutation":
                    buffers[spec.target].copy_(value)
                elif spec.kind == "user_input_mutation":
                    user_flat[spec.target].copy_(value)
                elif spec.kind == "user":  # "size" outputs only served to trim others
                    user_out.append(value if spec.layout is None else laid_out(value, spec.layout))
        user_out = leaves_as_inputs(self.aliases, user_out, user_flat)
        out = restore_sizes(pytree.tree_unflatten(user_out, self.out_spec), self.out_spec)
        return objects_as_inputs(self.aliases, out, (tuple(args), dict(kwargs or {})))

    def run_eager(self, *args, **kwargs) -> Any:
        """Runs the captured graph op by op in PyTorch: the reference every compiled form must match."""
        flat_out = self.graph_module(*self.flat_inputs(args, kwargs))
        return self.finish(args, kwargs, list(flat_out))

    def __call__(self, *args, **kwargs):
        return self.run_eager(*args, **kwargs)


def _target_name(target: Callable) -> str:
    name = str(target)
    return name if name.startswith("aten.") else getattr(target, "__name__", name)

