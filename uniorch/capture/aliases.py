"""Outputs that are the model's own inputs, returned as eager returns them: the same objects.

Why: a transformers decoder updates the cache it is given in place and returns that very object
(`out.past_key_values is cache`): a StaticCache's tensors are written by `index_copy_` and its first
call allocates them (lazy initialization); a DynamicCache appends. Capture flattens inputs and
outputs as pytrees, so the graph sees tensors only: tensor mutations come back as input mutations
(copied into the caller's tensors), but the output was a new cache rebuilt from the graph's outputs,
and the caller's cache kept its old state: an uninitialized StaticCache stayed uninitialized with
its position counter advanced, so the next call read zeros for the cached keys.

Here the capture records which output leaves and which output objects (pytree nodes with state:
caches) are the very objects of the inputs, by identity while tracing. After a compiled call the
caller's objects take the rebuilt objects' state (recursively, so nested layers keep their identity),
stand in the output where eager had them, and output tensors that are input tensors are those
inputs (their mutations already written back).
"""
from __future__ import annotations

import contextlib
import types
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.utils._pytree as pytree


@dataclass(frozen=True)
class Aliases:
    leaves: tuple[tuple[int, int], ...] = ()  # (flat user-output index, flat user-input index)
    objects: tuple[tuple[tuple, tuple], ...] = ()  # (path in the output tree, path in (args, kwargs))

    def __bool__(self) -> bool:
        return bool(self.leaves or self.objects)


def _children(x):
    node = pytree.SUPPORTED_NODES.get(pytree._get_node_type(x))
    return None if node is None else node.flatten_fn(x)


def _objects(tree, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """Every pytree node with state of its own (a class instance, not a tuple/list/dict), by path."""
    flat = _children(tree)
    if flat is None:
        return
    if hasattr(tree, "__dict__") and type(tree) not in (tuple, list, dict):
        yield path, tree
    for k, child in enumerate(flat[0]):
        yield from _objects(child, path + (k,))


def find(flat_in: list, in_objects: list, output) -> Aliases:
    """`flat_in` and `in_objects` (`_objects`) are the inputs' leaves and objects as the model received
    them while tracing, taken before the call (which may change the objects' structure: a cache's
    lazy initialization); `output` is what it returned."""
    where = {id(t): i for i, t in enumerate(flat_in) if isinstance(t, torch.Tensor)}
    leaves = tuple((j, where[id(t)]) for j, t in enumerate(pytree.tree_leaves(output))
                   if isinstance(t, torch.Tensor) and id(t) in where)
    paths = {id(o): p for p, o in in_objects}
    objects = tuple((p, paths[id(o)]) for p, o in _objects(output) if id(o) in paths)
    return Aliases(leaves, objects)


@contextlib.contextmanager
def recording(module: torch.nn.Module):
    """Records `find` for the module's call while tracing; `found[0]` is the last call's."""
    found: list = [Aliases()]
    before: list = []

    def pre(mod, args, kwargs):
        inputs = (tuple(args), dict(kwargs))
        before[:] = [pytree.tree_leaves(inputs), list(_objects(inputs))]

    def post(mod, args, kwargs, output):
        if before:
            found[0] = find(before[0], before[1], output)

    handles = [module.register_forward_pre_hook(pre, with_kwargs=True),
               module.register_forward_hook(post, with_kwargs=True)]
    try:
        yield found
    finally:
        for h in handles:
            h.remove()


def leaves_as_inputs(aliases: Aliases, user_out: list, user_in: list) -> list:
    """Output tensors that are input tensors: the caller's (their mutations are written back first)."""
    if not aliases.leaves:
        return user_out
    user_out = list(user_out)
    for j, i in aliases.leaves:
        user_out[j] = user_in[i]
    return user_out


def objects_as_inputs(aliases: Aliases, output, inputs):
    """Output objects that are input objects: the caller's, given the rebuilt objects' state."""
    if not aliases.objects:
        return output
    in_nodes, out_nodes = dict(_objects(inputs)), dict(_objects(output))
    subs = {}
    for out_path, in_path in aliases.objects:
        dst, src = in_nodes.get(in_path), out_nodes.get(out_path)
        if dst is None or src is None or type(dst) is not type(src):
            continue
        if not any(out_path[:len(p)] == p for p in subs):  # an enclosing object carries it already
            _adopt(dst, src)
        subs[out_path] = dst
    return _rebuild(output, (), subs)


_MISSING = object()


def _adopt(dst, src) -> None:
    state = vars(dst)
    for k, v in vars(src).items():
        state[k] = _merged(state.get(k, _MISSING), v)


def _merged(old, new):
    if old is new or old is _MISSING or isinstance(new, torch.Tensor) or type(old) is not type(new):
        return new
    if isinstance(new, list) and len(old) == len(new):
        old[:] = [_merged(o, n) for o, n in zip(old, new)]
        return old
    if isinstance(new, dict) and old.keys() == new.keys():
        for k in new:
            old[k] = _merged(old[k], new[k])
        return old
    if hasattr(new, "__dict__") and not isinstance(new, _VALUES):  # a layer of a cache: kept, updated
        _adopt(old, new)
        return old
    return new


_VALUES = (type, torch.Tensor, types.FunctionType, types.MethodType, types.ModuleType)


def _rebuild(x, path: tuple, subs: dict):
    if path in subs:
        return subs[path]
    if not any(p[:len(path)] == path for p in subs):
        return x
    flat = _children(x)
    if flat is None:
        return x
    children, context = flat
    node = pytree.SUPPORTED_NODES[pytree._get_node_type(x)]
    return node.unflatten_fn([_rebuild(c, path + (k,), subs) for k, c in enumerate(children)], context)
