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
    """Registers the pytree nodes the library `module` comes from needs (transformers' caches)."""
    if "transformers" not in sys.modules or type(module) in _done:
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
