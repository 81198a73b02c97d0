"""The example backend's own stages after TTIR. Each is `fn(previous_output, metadata) -> text`.

`check_ttir` does what a vendor toolchain that reads TTIR from a file must do first: parse the
text in a fresh MLIR context (Triton's own bindings, so every Triton dialect is known) and verify
it. This catches TTIR that only round-trips inside the process that built it. `summarize` walks
the parsed module and reports what a hardware engineer asks first: how many ops, how many memory
operations and dots, which reductions; and it enforces the backend's `max_ops` option.
"""
from __future__ import annotations

import json
import os
import tempfile


def _parse(text: str):
    """TTIR text → a Triton MLIR module in a fresh context (the parser reads files only)."""
    from triton._C.libtriton import ir

    context = ir.context()
    ir.load_dialects(context)
    fd, path = tempfile.mkstemp(suffix=".ttir")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        module = ir.parse_mlir_module(path, context)
    finally:
        os.unlink(path)
    module.context = context  # keep the context alive as long as the module
    return module


def check_ttir(src, metadata: dict, options) -> str:
    text = str(src)  # the first stage gets Triton's module object; its text is what a file holds
    module = _parse(text)
    if options.verify and not module.verify():
        raise ValueError("TTIR fails the MLIR verifier after a round trip through text")
    metadata["entry"] = module.get_entry_func_name()
    return str(module)


# Ops a hardware engineer counts: memory traffic, matrix units, cross-lane reductions.
_MEMORY = ("tt.load", "tt.store", "tt.atomic_rmw", "tt.atomic_cas")
_MATRIX = ("tt.dot", "tt.dot_scaled")


def summarize(src: str, metadata: dict, options) -> str:
    module = _parse(src)
    counts: dict[str, int] = {}
    module.walk(lambda op: counts.__setitem__(op.get_name(), counts.get(op.get_name(), 0) + 1))
    total = sum(n for name, n in counts.items() if name not in ("builtin.module", "tt.func"))
    if total > options.max_ops:
        raise ValueError(f"kernel has {total} TTIR ops, over this backend's max_ops={options.max_ops}")
    summary = {
        "entry": metadata.get("entry") or module.get_entry_func_name(),
        "ops": total,
        "memory_ops": {k: counts[k] for k in _MEMORY if k in counts},
        "dots": sum(counts.get(k, 0) for k in _MATRIX),
        "reductions": counts.get("tt.reduce", 0) + counts.get("tt.scan", 0),
        "loops": counts.get("scf.for", 0) + counts.get("scf.while", 0),
        "histogram": dict(sorted(counts.items())),
    }
    metadata["ops"] = total  # stages may record facts for the runtime; they must be JSON-able
    return json.dumps(summary, indent=1)
