"""Python values a capture read from the model, guarded at each call.

A capture bakes what the forward read from Python attributes into the graph: `x * self.scale`
becomes a multiply by 2.0, `if self.config.output_hidden_states` picks one structure. Setting
`model.scale = 3.0` afterwards must not leave the compile answering with 2.0 (torch.compile's
Dynamo guards every attribute it reads, and recompiles).

While the model is traced, `recording` wraps `__getattribute__` of the model's module classes
(and of transformers' config objects its modules hold), and keeps each read of a plain value (a
number, string, None, or a tuple of those) from an object's own attributes. `AttributeGuard`
compares them at each call, one `operator.itemgetter` over each object's `__dict__`.

torch.nn's classes (a LayerNorm's eps, LeakyReLU's slope, Dropout's p) and transformers' Conv1D
and activations are many (74 of a GPT-2's modules) and almost never change after a compile, so
comparing theirs at every call would cost more than everything else the guard does. Their reads
are compared only after an attribute of one of those classes was set since the last comparison:
their `__setattr__` counts writes (`_count_writes`, patched once per class), and one integer
compare a call stands for all of them. Setting `model.ln.eps = 1e-3` recompiles, as with
torch.compile; a write into the instance's `__dict__` directly is not seen.

Left out: the `training` flag, which `module_modes.py` folds into the guard key, and nn.Module's
own bookkeeping attributes.
"""
from __future__ import annotations

import contextlib
import functools
import operator
import threading
import types
import warnings
from typing import Any, Optional

import torch
from torch import nn

from . import user_code
from .module_modes import mode_free, owning_module
from .user_code import LIBRARY_ROOTS, MODULE_OWN as _MODULE_OWN, current, named_slots

_PLAIN = (bool, int, float, str, type(None))


def _plain(value) -> bool:
    if isinstance(value, _PLAIN):
        return True
    return type(value) is tuple and len(value) <= 8 and all(isinstance(v, _PLAIN) for v in value)


class Snapshot:
    """A dict or list a forward read (`self.cfg["k"]`, a global `CFG`, a list of anchor tensors),
    as it was: equal to the live one while that holds the same keys, equal plain values and the
    same tensors (by identity: the capture reads a tensor each call, so one updated in place is
    seen). A guard compares `live != snapshot`, which Python answers here."""

    __slots__ = ("kind", "items")

    def __init__(self, value):
        self.kind = type(value)
        self.items = tuple(value.items()) if self.kind is dict else tuple(value)

    def __eq__(self, other):
        if type(other) is not self.kind or len(other) != len(self.items):
            return False
        if self.kind is dict:
            return all(k == j and _same_item(v, w) for (k, v), (j, w) in zip(other.items(), self.items))
        return all(_same_item(v, w) for v, w in zip(other, self.items))

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = None

    def __repr__(self) -> str:
        return repr(dict(self.items) if self.kind is dict else self.kind(self.items))


def _same_item(now, then) -> bool:
    return now is then or (not isinstance(now, torch.Tensor) and type(now) is type(then) and now == then)


def is_container(value) -> bool:
    """A small dict or list of plain values and tensors (dict keys plain): what `Snapshot` keeps."""
    if type(value) is dict:
        return len(value) <= 64 and all(isinstance(k, _PLAIN) and (_plain(v) or isinstance(v, torch.Tensor))
                                        for k, v in value.items())
    return type(value) is list and len(value) <= 64 and all(_plain(v) or isinstance(v, torch.Tensor) for v in value)


# functions a module holds as attributes (`self.act = torch.relu`): guarded by identity, so setting
# another one recompiles
_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, functools.partial)


def _is_config(obj) -> bool:
    return any(c.__name__ in ("PretrainedConfig", "PreTrainedConfig") for c in type(obj).__mro__)


def _on_write(obj) -> bool:
    """Whether `obj`'s reads are compared only after a counted write (torch.nn's classes,
    transformers' Conv1D and activations), not at every call."""
    return isinstance(obj, nn.Module) and (type(obj).__module__.startswith("torch.nn.") or mode_free(obj))


def _watched_classes(model: nn.Module) -> list[type]:
    """The classes whose reads count: of the model's modules, of the transformers configs they
    hold as `config`, and of the settings objects they hold (`settings_held`)."""
    classes: dict[type, None] = {}
    for m in model.modules():
        classes[type(m)] = None
        if _on_write(m):
            _count_writes(type(m))
        config = m.__dict__.get("config")
        if config is not None and _is_config(config):
            classes[type(config)] = None
        for _, obj in settings_held(m):
            if type(obj).__flags__ & _HEAP_TYPE:  # a Python class: its reads are recorded
                classes[type(obj)] = None
    return list(classes)


def _held_before(model: nn.Module) -> set[int]:
    """The objects whose reads and writes count: the model's modules, their configs and settings
    objects, as they are before the trace. Instances of those classes made during the forward
    are fresh at every call: BART's forward deep-copies its config and deletes the copy's
    decoder_* attributes (transformers' get_text_config), after which they read as the class
    defaults; guarded, the copy's reads recompiled every call."""
    known = set()
    for m in model.modules():
        known.add(id(m))
        config = m.__dict__.get("config")
        if config is not None and _is_config(config):
            known.add(id(config))
        known.update(id(obj) for _, obj in settings_held(m))
    return known


_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class defined in Python, whose methods can be set


def settings_held(m: nn.Module) -> list[tuple[str, Any]]:
    """The objects `m` holds as attributes that carry settings its forward may read: instances
    of the user's classes (a dataclass config as nanoGPT's, argparse's Namespace) and
    SimpleNamespaces. Not modules, tensors, callables, classes, or PyTorch's and the standard
    library's objects."""
    out = []
    for key, obj in m.__dict__.items():
        if key in _MODULE_OWN or isinstance(obj, (nn.Module, torch.Tensor, type)) or callable(obj):
            continue
        cls = type(obj)
        if cls is types.SimpleNamespace or (
                hasattr(obj, "__dict__") and cls.__module__.partition(".")[0] not in LIBRARY_ROOTS
                and not _is_config(obj)):
            out.append((key, obj))
    return out


_writes = [0]  # attributes set on instances of the classes `_count_writes` patched, ever


def _count_writes(cls: type) -> None:
    setattr_ = cls.__setattr__
    if getattr(setattr_, "_uniorch_counts", False):  # this class or a base it inherits it from
        return

    def __setattr__(self, name, value):
        setattr_(self, name, value)
        _writes[0] += 1

    __setattr__._uniorch_counts = True
    cls.__setattr__ = __setattr__


_lock = threading.Lock()
_patched: dict[tuple, list] = {}  # (class, dunder) -> [its own method or None, captures using it]
_local = threading.local()  # .stack: (reads, writes) of this thread's captures, innermost last


_WHOLE = frozenset({"__deepcopy__", "__getstate__", "__reduce_ex__", "__dict__"})  # copy, pickle, vars()


def _read_whole(obj, reads: dict) -> None:
    """Every plain value of `obj`, as read: a copy of a settings object (BART's forward reads its
    config's deep copy) carries them all, and the reads of the copy are not the model's."""
    for name, value in object.__getattribute__(obj, "__dict__").items():
        if _plain(value) and name not in _MODULE_OWN:
            reads.setdefault((id(obj), name), (obj, name, value))


def _recorder(original):
    def __getattribute__(self, name):
        stack = getattr(_local, "stack", None)
        if stack and name in _WHOLE and not isinstance(self, nn.Module) and id(self) in stack[-1][2]:
            _read_whole(self, stack[-1][0])
        value = original(self, name)
        if stack and name not in _MODULE_OWN and not name.startswith("__") and not _generate_wrapper(value):
            # a plain tensor attribute (not a parameter or buffer) is guarded by identity; what
            # export's trace reads may be its fake stand-in, so the tensor is taken afterwards
            kept = (value if _plain(value) or isinstance(value, _FUNCTIONS) else
                    _TENSOR if isinstance(value, torch.Tensor) else _CONTAINER if is_container(value) else None)
            try:
                mine = kept is not None and name in object.__getattribute__(self, "__dict__")
            except AttributeError:
                mine = False
            if mine and (id(self), name) not in stack[-1][0] and id(self) in stack[-1][2]:
                stack[-1][0][(id(self), name)] = (self, name, kept)
        return value

    __getattribute__._uniorch_original = original
    return __getattribute__


def _write_recorder(original):
    """A module's `__setattr__` keeping, per entry of its `__dict__` the traced forward sets, the
    value before and the last one written: export puts those entries back after its trace (a
    config object's writes, which it leaves, stay made; a property's go elsewhere). PyTorch's own
    modules are left out: a GraphModule's recompile sets its generated code's attributes."""
    def __setattr__(self, name, value):
        stack = getattr(_local, "stack", None)
        if not stack or name in _MODULE_OWN or name.startswith("__") or not isinstance(self, nn.Module) \
                or type(self).__module__.startswith("torch.") or id(self) not in stack[-1][2]:
            original(self, name, value)
            return
        state = object.__getattribute__(self, "__dict__")
        before = state.get(name, _GONE)
        original(self, name, value)
        if name in state:
            writes = stack[-1][1]
            key = (id(self), name)
            if key in writes:
                writes[key][3] = state[name]
            else:
                writes[key] = [self, name, before, state[name]]

    __setattr__._uniorch_original = original
    if getattr(original, "_uniorch_counts", False):
        __setattr__._uniorch_counts = True
    return __setattr__


_RECORDERS = {"__getattribute__": _recorder, "__setattr__": _write_recorder}


def attribute_writes(writes: dict, model: nn.Module) -> list[str]:
    """The plain values (numbers, strings, flags: a counter, a lazy initialisation's flag) a
    traced forward set on the model's objects and left changed, as 'where.name: before ->
    after'. Other values are left out: PyTorch's own caches derived from parameters (an RNN's
    flat weight list) are set anew whenever export swaps the parameters."""
    if not writes:
        return []
    names = {id(m): n for n, m in model.named_modules()}
    out = []
    for obj, name, before, after in writes.values():
        if not _plain(after) or not (before is _GONE or _plain(before)) or (before is not _GONE and before == after):
            continue
        where = names.get(id(obj)) or type(obj).__name__
        old = "unset" if before is _GONE else _short(before)
        out.append(f"{where}.{name}: {old} -> {_short(after)}")
    return out


def undo_writes(writes: dict, reads: dict) -> None:
    """Puts back the plain values a traced forward set on the model (export puts back only the
    entries that existed before), so the eager run of the call makes the writes itself: a lazy
    initialisation's flag set by the trace alone would have told the eager run that the
    initialisation was done. The values before become reads, so the guard sees the eager run's
    writes and the next call is captured again."""
    for obj, name, before, after in writes.values():
        if not _plain(after) or not (before is _GONE or _plain(before)):
            continue
        state = object.__getattribute__(obj, "__dict__")
        if before is _GONE:
            state.pop(name, None)
        else:
            state[name] = before
        reads[(id(obj), name)] = (obj, name, before)


def tensor_writes(writes: dict, model: nn.Module) -> list[str]:
    """The attributes (not parameters or buffers) a traced forward set to a tensor on the model's
    own modules, as 'where.name': state the module carries between calls (RecurrentGemma's
    recurrent and convolution states). Export restores the attribute after its trace."""
    names = {id(m): n for n, m in model.named_modules()}
    out = []
    for obj, name, before, after in writes.values():
        if isinstance(after, torch.Tensor) and after is not before:
            out.append(f"{names.get(id(obj)) or type(obj).__name__}.{name}")
    return out


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@contextlib.contextmanager
def recording(model):
    """Yields two dicts filled while tracing `model` in this thread: the reads, (id(obj), name) ->
    (obj, name, value) for each plain value read from an object's own attributes; and the writes
    (`attribute_writes` says which changed a value). Classes are patched once for however many
    captures use them at a time (threads compiling two models of one class), and each recorder
    calls the class's own method, never another recorder."""
    reads, writes = {}, {}
    if not isinstance(model, nn.Module):
        yield reads, writes
        return
    classes, known = _watched_classes(model), _held_before(model)
    with _lock:
        for cls in classes:
            for dunder, make in _RECORDERS.items():
                entry = _patched.get((cls, dunder))
                if entry is not None:
                    entry[1] += 1
                    continue
                original = getattr(cls, dunder)
                original = getattr(original, "_uniorch_original", original)
                _patched[(cls, dunder)] = [cls.__dict__.get(dunder), 1]
                setattr(cls, dunder, make(original))
    stack = _local.__dict__.setdefault("stack", [])
    stack.append((reads, writes, known))
    try:
        yield reads, writes
    finally:
        stack.pop()
        with _lock:
            for cls in classes:
                for dunder in _RECORDERS:
                    entry = _patched[(cls, dunder)]
                    entry[1] -= 1
                    if entry[1] == 0:
                        del _patched[(cls, dunder)]
                        if entry[0] is None:
                            delattr(cls, dunder)
                        else:
                            setattr(cls, dunder, entry[0])


def warn_of_user_hooks(model: nn.Module) -> None:
    """Forward hooks run while the model is traced, on tracing tensors, not at each compiled call:
    what one returns is in the graph, but one that stores an output (feature extraction) would
    leave a FakeTensor in the user's dict. Said once per capture, naming the modules; transformers'
    and PyTorch's own hooks only feed the model's outputs."""
    where = []
    for name, m in model.named_modules():
        for hook in (*m._forward_hooks.values(), *m._forward_pre_hooks.values()):
            owner = getattr(hook, "__module__", None) or ""
            if not owner.startswith(("transformers.", "torch.")):
                where.append(name or "(model)")
                break
    if where:
        names = ", ".join(repr(w) for w in where[:4]) + (" ..." if len(where) > 4 else "")
        warnings.warn(f"uniorch: forward hooks on module {names} run "
                      "when the model is captured, not at each call: what they return is compiled, but "
                      "anything they store outside the model (an activation in a dict) is a tracing "
                      "tensor. Return it from the model instead, or call the model eagerly.", stacklevel=4)


def _hook_state(model: nn.Module) -> tuple:
    """Which forward hooks and pre-hooks are registered: per module that has any, and globally."""
    from torch.nn.modules import module as nn_module

    mods = tuple((name, tuple(m._forward_hooks), tuple(m._forward_pre_hooks)) for name, m in model.named_modules()
                 if m._forward_hooks or m._forward_pre_hooks)
    return mods, tuple(nn_module._global_forward_hooks), tuple(nn_module._global_forward_pre_hooks)


class _Hooks:
    """The forward hooks a capture ran (taken after it: transformers installs its output-capturing
    hooks in the first call). A hook registered or removed since changes the model's forward, so
    the compile must not serve: a hook that scales an output, added after compiling, was ignored.
    Every registration takes a number from one counter (RemovableHandle.next_id), so a call
    compares that and the sizes of the hook tables the capture saw, and lists the hooks only
    when either moved."""

    def __init__(self, model: nn.Module):
        from torch.nn.modules import module as nn_module
        from torch.utils.hooks import RemovableHandle

        self.model, self.handles = model, RemovableHandle
        self.state = _hook_state(model)
        self.next_id = RemovableHandle.next_id
        tables = [nn_module._global_forward_hooks, nn_module._global_forward_pre_hooks]
        tables += [t for m in model.modules() for t in (m._forward_hooks, m._forward_pre_hooks) if t]
        self.sizes = [(t, len(t)) for t in tables]

    def holds(self) -> bool:
        if self.handles.next_id == self.next_id and all(len(t) == n for t, n in self.sizes):
            return True
        if _hook_state(self.model) != self.state:
            return False
        self.next_id = self.handles.next_id  # a hook elsewhere (another model, a tensor): nothing of ours
        return True


class _Children:
    """Which module each of the model's modules holds as a child: replacing one after the compile
    (`model[1] = nn.Tanh()`, `model.head = nn.Identity()`) changes the forward, and the compile
    must not serve it. The children are compared by identity at each call, one tuple per module
    that has any; a replaced child's own children are then another module's."""

    def __init__(self, model: nn.Module):
        self.tables = [(m._modules, tuple(m._modules.values())) for m in model.modules() if m._modules]
        # a forward set on the instance (`model.forward = types.MethodType(...)`), by identity
        self.own, self.forward = model.__dict__, _own_forward(model.__dict__)

    def holds(self) -> bool:
        if _own_forward(self.own) is not self.forward:
            return False
        for table, children in self.tables:
            if len(table) != len(children) or any(map(operator.is_not, table.values(), children)):
                return False
        return True


def _generate_wrapper(value) -> bool:
    """uniorch's `generate()` routes the model's forward through its compile (generation.py), a
    new wrapper each call; what the capture traces is the forward inside it."""
    return getattr(value, "uniorch_generate", False) is True


def _own_forward(state: dict):
    f = state.get("forward")
    return None if _generate_wrapper(f) else f


class AttributeGuard:
    """The values one capture read; `holds()` while every one is unchanged (and the hooks and the
    modules' children too)."""

    def __init__(self, reads: dict, names: dict[int, str], hooks: Optional[_Hooks] = None,
                 globals_: Optional[_FunctionGlobals] = None, children: Optional[_Children] = None):
        self.hooks, self.globals, self.children = hooks, globals_, children
        by_obj: dict[int, tuple[Any, list]] = {}
        self.tensors = []  # (the object's __dict__, name, the tensor it held, where): by identity
        for obj, name, value in reads.values():
            if value is _TENSOR:
                state = object.__getattribute__(obj, "__dict__")
                if isinstance(state.get(name), torch.Tensor):
                    self.tensors.append((state, name, state[name], names.get(id(obj), type(obj).__name__)))
                continue
            if value is _CONTAINER:  # a dict or list attribute: its items, as they are after the capture
                held = object.__getattribute__(obj, "__dict__").get(name)
                if not is_container(held):
                    continue
                value = Snapshot(held)
            by_obj.setdefault(id(obj), (obj, []))[1].append((name, value))
        self.checks, self.written = [], []  # compared at every call; after a counted write
        self.seen = _writes[0]
        for key, (obj, pairs) in by_obj.items():
            attrs = tuple(n for n, _ in pairs)
            expected = tuple(v for _, v in pairs) if len(pairs) > 1 else pairs[0][1]
            # the values straight from the instance's dict, where each was read: a transformers
            # config's own __getattribute__ takes a microsecond an attribute
            state = object.__getattribute__(obj, "__dict__")
            where = names.get(key, type(obj).__name__)
            check = (state, operator.itemgetter(*attrs), expected, attrs, where, obj)
            (self.written if _on_write(obj) else self.checks).append(check)

    def holds(self) -> bool:
        if self.hooks is not None and not self.hooks.holds():
            return False
        if self.globals is not None and not self.globals.holds():
            return False
        if self.children is not None and not self.children.holds():
            return False
        if not _same(self.checks):
            return False
        for state, name, tensor, _ in self.tensors:
            if state.get(name) is not tensor:
                return False
        if self.written and _writes[0] != self.seen:
            seen = _writes[0]
            if not _same(self.written):
                return False
            self.seen = seen
        return True

    def changed(self) -> str:
        """The first values that differ now, as 'where.name: old -> new'."""
        out = []
        if self.hooks is not None and _hook_state(self.hooks.model) != self.hooks.state:
            out.append("forward hooks registered or removed")
        if self.children is not None and not self.children.holds():
            out.append("a submodule or the forward replaced")
        if self.globals is not None:
            out += self.globals.changed()
        out += [f"{where + '.' if where else ''}{name}: another tensor" for state, name, tensor, where in self.tensors
                if state.get(name) is not tensor]
        for _, _, expected, attrs, where, obj in self.checks + self.written:
            olds = expected if len(attrs) > 1 else (expected,)
            for name, old in zip(attrs, olds):
                new = getattr(obj, name, _GONE)
                if new != old:
                    shown = ["unset" if v is _GONE else repr(v) for v in (old, new)]
                    out.append(f"{where + '.' if where else ''}{name}: {shown[0]} -> {shown[1]}")
        return ", ".join(out[:3]) + (f" and {len(out) - 3} more" if len(out) > 3 else "")


def _same(checks: list) -> bool:
    for state, get, expected, attrs, _, _ in checks:
        try:
            if get(state) != expected:
                return False
        except KeyError:  # deleted since, or still unset (`undo_writes`)
            now = tuple(state.get(a, _GONE) for a in attrs)
            if (now if len(attrs) > 1 else now[0]) != expected:
                return False
    return True


class _FunctionGlobals:
    """The globals and closure variables the user's functions name in their own code (a compiled
    function, or the forwards and hooks of a model's own classes: `user_code.py`), where they hold
    a plain value, a tensor, or a small dict or list of those: rebinding `w = torch.randn(...)` or
    `SCALE = 5.0`, or setting `CFG["scale"] = 2.0`, after the compile must not leave it computing
    with the old one (a tensor by identity: updating it in place is seen, the capture reads it each
    call). Helpers they call are not looked into."""

    def __init__(self, fns):
        self.slots = []  # (namespace dict or cell, name, value or Snapshot)
        seen = set()
        for fn in fns:
            for where, name, value in named_slots(fn):
                if (id(where), name) in seen:
                    continue
                seen.add((id(where), name))
                if _guarded(value):
                    self.slots.append((where, name, value))
                elif is_container(value):
                    self.slots.append((where, name, Snapshot(value)))

    @staticmethod
    def _differs(now, value) -> bool:
        if isinstance(value, Snapshot):
            return value != now
        return now is not value and (isinstance(value, torch.Tensor) or type(now) is not type(value) or now != value)

    def holds(self) -> bool:
        return not any(self._differs(current(where, name), value) for where, name, value in self.slots)

    def changed(self) -> list[str]:
        out = []
        for where, name, value in self.slots:
            now = current(where, name)
            if self._differs(now, value):
                what = "another tensor" if isinstance(value, torch.Tensor) else f"{value!r} -> {now!r}"
                out.append(f"{name}: {what}")
        return out


_GONE = object()
_TENSOR = object()  # a read of a tensor attribute, resolved after the capture
_CONTAINER = object()  # a read of a dict or list attribute, its snapshot taken after the capture


def _guarded(value) -> bool:
    return isinstance(value, torch.Tensor) or _plain(value)


def attribute_guard(model, reads: dict) -> Optional[AttributeGuard]:
    model = owning_module(model)
    if not isinstance(model, nn.Module) or isinstance(model, torch.fx.GraphModule):
        fn = getattr(model, "__func__", model)  # a bound method: its function's names
        named = _FunctionGlobals([fn]) if hasattr(fn, "__code__") and hasattr(fn, "__globals__") else None
        if not reads and not (named and named.slots):
            return None
        return AttributeGuard(reads, {}, globals_=named)
    names: dict[int, str] = {}
    reads = dict(reads)  # and a SimpleNamespace's plain values below
    for name, m in model.named_modules():
        names.setdefault(id(m), name)
        config = m.__dict__.get("config")
        if config is not None:
            names.setdefault(id(config), f"{name}.config" if name else "config")
        for key, obj in settings_held(m):
            names.setdefault(id(obj), f"{name}.{key}" if name else key)
            if not type(obj).__flags__ & _HEAP_TYPE:  # no recorder: all its plain values, as read
                for k, v in vars(obj).items():
                    if _plain(v):
                        reads.setdefault((id(obj), k), (obj, k, v))
    named = _FunctionGlobals(user_code.functions(model))
    return AttributeGuard(reads, names, _Hooks(model), globals_=named if named.slots else None,
                          children=_Children(model))
