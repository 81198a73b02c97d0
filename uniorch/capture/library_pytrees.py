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
        return
    try:  # transformers 4.x: DynamicCache only
        from transformers.integrations.executorch import register_dynamic_cache_export_support
    except ImportError:
        return
    register_dynamic_cache_export_support()


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
