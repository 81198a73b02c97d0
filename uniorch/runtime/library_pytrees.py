"""Container types of libraries users pass to and get from their models, made pytree nodes.

Why: capture traces with torch.export, which flattens a model's inputs and outputs as pytrees. A
transformers decoder in its default settings returns (and, under `generate`, takes) a `Cache`
(DynamicCache, StaticCache, ...), which is no pytree node until transformers registers it: the
trace failed with "Found <class 'transformers.cache_utils.DynamicCache'> in output, which is not a
known type" and the whole model ran eagerly. transformers has its own registration for export;
it is called here, once per model class, before tracing. The cache's tensors then are graph
inputs and outputs like any other, and the runtime rebuilds the cache object from the spec.
"""
from __future__ import annotations

import sys

_done: set = set()


def register_for(module) -> None:
    """Registers the pytree nodes the library `module` comes from needs (transformers' caches and
    output classes)."""
    if "transformers" not in sys.modules:
        return
    _model_outputs()
    if type(module) in _done:
        return
    _done.add(type(module))
    try:  # transformers 5: every Cache subclass and the model's own *Cache classes
        from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model
    except ImportError:
        register_cache_pytrees_for_model = None
    if register_cache_pytrees_for_model is not None:
        register_cache_pytrees_for_model(module)
        _counters_as_lengths()
        return
    try:  # transformers 4.x: DynamicCache only
        from transformers.integrations.executorch import register_dynamic_cache_export_support
    except ImportError:
        return
    register_dynamic_cache_export_support()


def register_known() -> None:
    """Without a model (a bundle loaded in a new process, whose input spec names a transformers
    cache): every transformers Cache class, and the output classes, as capture registers them."""
    import importlib

    try:
        importlib.import_module("transformers")
    except ImportError:
        return
    _model_outputs()
    try:
        from transformers.cache_utils import Cache
        from transformers.exporters.exporter_dynamo import register_pytree_node
    except ImportError:  # transformers 4.x: DynamicCache only
        try:
            from transformers.integrations.executorch import register_dynamic_cache_export_support
        except ImportError:
            return
        register_dynamic_cache_export_support()
        return
    todo = list(Cache.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        register_pytree_node(cls)
    register_pytree_node(Cache)
    _counters_as_lengths()


def _model_outputs() -> None:
    """transformers registers each ModelOutput class as a pytree node when the class is created,
    except while `torch.compiler.is_compiling()` (it assumes an eager run registered it before);
    a class first created under a trace (a module imported lazily inside a traced forward, under
    Dynamo or export) stays unregistered for the whole process, and every later capture of a
    model returning it failed with "Found <class ...Output> in output, which is not a known type".
    Registers those, outside any trace."""
    import torch
    import torch.utils._pytree as pytree

    generic = sys.modules.get("transformers.utils.generic")
    register = getattr(generic, "_register_model_output_pytree_node", None)
    base = getattr(generic, "ModelOutput", None)
    if register is None or base is None or torch.compiler.is_compiling():
        return
    todo = list(base.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls not in pytree.SUPPORTED_NODES:
            getattr(generic, "_registered_model_output_types", set()).discard(cls)
            register(cls)


_KEYS_LEN = "uniorch: the length of keys"  # a sliding layer's counter, in a cache's pytree context
_LEAF = "uniorch: the rows of an extra leaf"  # ... past the window: (_LEAF, the leaf's index among the extras)
# sliding layers and the attribute holding their token counter as a Python int
_COUNTERS = (("DynamicSlidingWindowLayer", "cumulative_length"), ("StaticSlidingWindowLayer", "cumulative_length_int"))


def _counters_as_lengths() -> None:
    """A sliding-window cache layer (Mistral's, Gemma's) counts the tokens it has seen in a Python
    int, `cumulative_length`, which transformers' pytree context holds as structure: every decode
    step was a new input structure, and `generate()` compiled every step anew, up to the compile
    limit and eagerly after it. Until the window fills, the counter equals the length of the
    layer's keys, so the context says just that, and unflattening reads it back from the keys (a
    symbolic size in a symbolic compile, whose checks against the window become the compile's
    guards). Past the window the keys keep the window's length and the counter goes on: it travels
    as the row count of an empty extra leaf (`torch.empty(count, 0)`, no memory), so the decode
    steps past the window share one symbolic compile as well, the counter a size symbol whose
    relation to the window export checks. A static cache's sliding layer keeps its counter beside
    keys of fixed length (`cumulative_length_int`): it always travels as such a leaf."""
    import torch.utils._pytree as pytree

    cache_utils = sys.modules.get("transformers.cache_utils")
    layer = {getattr(cache_utils, name, None): attr for name, attr in _COUNTERS}
    layer.pop(None, None)
    if not layer:
        return
    for cls, node in list(pytree.SUPPORTED_NODES.items()):
        flatten = node.flatten_fn
        if getattr(flatten, "__name__", "") != "_pytree_flatten" or "transformers" not in flatten.__module__:
            continue
        pytree._deregister_pytree_node(cls)
        pytree.register_pytree_node(cls, _wrap_flatten(flatten, layer), _wrap_unflatten(node.unflatten_fn, layer),
                                    serialized_type_name=f"{cls.__module__}:{cls.__qualname__}",
                                    flatten_with_keys_fn=_wrap_flatten_with_keys(flatten, layer))


def _sliding_layers(obj, layer_cls: dict, depth: int = 0):
    """(layer, the attribute of its counter) for each sliding layer of a cache `obj`."""
    attr = next((a for cls, a in layer_cls.items() if isinstance(obj, cls)), None)
    if attr is not None:
        yield obj, attr
    elif depth < 3 and hasattr(obj, "__dict__"):
        for v in vars(obj).values():
            for item in (v if type(v) in (list, tuple) else (v,)):
                if hasattr(item, "__dict__"):
                    yield from _sliding_layers(item, layer_cls, depth + 1)


def _same_size(a, b) -> bool:
    import torch

    if isinstance(a, torch.SymInt) or isinstance(b, torch.SymInt):
        expr = [x.node.expr if isinstance(x, torch.SymInt) else x for x in (a, b)]
        return bool(expr[0] == expr[1])
    return type(a) is int and a == b


def _marked(obj, layer_cls) -> tuple[list, list]:
    """The sliding layers of `obj` whose counter is now structure-free, marked (undo: the first
    list), and the extra leaves carrying the counters past the window (the second)."""
    import torch

    done, extra = [], []
    for lay, attr in _sliding_layers(obj, layer_cls):
        state = vars(lay)
        keys, count = state.get("keys"), state.get(attr)
        if not isinstance(keys, torch.Tensor) or keys.dim() < 2 or state.get("record_past"):
            continue
        if attr == "cumulative_length" and _same_size(count, keys.shape[-2]):
            state[attr] = _KEYS_LEN
        elif isinstance(count, (int, torch.SymInt)) and type(count) is not bool:
            state[attr] = (_LEAF, len(extra))
            extra.append(torch.empty((count, 0), dtype=torch.uint8, device=keys.device))
        else:
            continue
        done.append((state, attr, count))
    return done, extra


def _wrap_flatten(flatten, layer_cls):
    def _pytree_flatten(obj):
        undo, extra = _marked(obj, layer_cls)
        try:
            leaves, context = flatten(obj)
        finally:
            for state, attr, count in undo:
                state[attr] = count
        return list(leaves) + extra, [context, len(extra)]  # JSON-native: a bundle stores it
    return _pytree_flatten


def _wrap_flatten_with_keys(flatten, layer_cls):
    import torch.utils._pytree as pytree

    def flatten_with_keys(obj):
        leaves, context = _wrap_flatten(flatten, layer_cls)(obj)
        return [(pytree.SequenceKey(i), leaf) for i, leaf in enumerate(leaves)], context
    return flatten_with_keys


def _wrap_unflatten(unflatten, layer_cls):
    def _pytree_unflatten(values, context):
        context, n_extra = context
        values = list(values)
        extra = values[len(values) - n_extra:]
        obj = unflatten(values[:len(values) - n_extra], context)
        for lay, attr in _sliding_layers(obj, layer_cls):
            count = vars(lay).get(attr)
            if count == _KEYS_LEN:
                vars(lay)[attr] = lay.keys.shape[-2]
            elif type(count) is tuple and len(count) == 2 and count[0] == _LEAF:
                vars(lay)[attr] = extra[count[1]].shape[0]
        return obj
    return _pytree_unflatten
