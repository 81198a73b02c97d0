"""Per transformers architecture in default settings (tests/test_transformers_defaults.py's tiny
configs): kernels, share of captured ops compiled, largest error against eager, capture time.

    python -m uniorch.tools.transformers_table [--models a,b] [--out docs/perf/transformers_defaults.md]

Run from a checkout (it reads the test module's model table); compiles for the interpreter, so each
model also runs its kernels once. The error is the largest absolute difference over the logits (or
last hidden state) and every cached key and value.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import warnings
from pathlib import Path

import torch
import torch.utils._pytree as pytree


def _table_module():
    path = Path(__file__).resolve().parents[1] / "tests" / "test_transformers_defaults.py"
    spec = importlib.util.spec_from_file_location("_transformers_defaults", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _error(out, ref) -> float:
    key = "logits" if hasattr(ref, "logits") else "last_hidden_state"
    pairs = [(getattr(out, key), getattr(ref, key))]
    if getattr(ref, "past_key_values", None) is not None:
        pairs += list(zip(pytree.tree_leaves(out.past_key_values), pytree.tree_leaves(ref.past_key_values)))
    if any(g.shape != w.shape for g, w in pairs):
        return float("inf")
    # a layer's cache may be empty (gemma3's sliding layers before their first tokens)
    return max(float((g.double() - w.double()).abs().max()) for g, w in pairs if w.numel())


def row(name: str, factory, inputs) -> str:
    import transformers

    import uniorch

    torch.manual_seed(0)
    model = factory(transformers).eval()
    args, kwargs = inputs
    cm = uniorch.compile(model, target="interpret")
    out = cm(*args, **kwargs)
    with torch.no_grad():
        ref = model(*args, **kwargs)
    rep = cm.explain(*args, **kwargs)
    fell = f" ({len(rep.fallbacks)} ops eager)" if rep.fallbacks else ""
    return (f"| {name} | {len(rep.kernels)} | {rep.compiled_ops}/{rep.captured_ops} "
            f"({100 * rep.compiled_fraction:.1f} %){fell} | {_error(out, ref):.1e} | {rep.timings['capture']:.1f} s |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated names (default: all)")
    parser.add_argument("--out", help="also write the table (markdown) to this file")
    opts = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("transformers").setLevel(logging.ERROR)
    t = _table_module()
    factories = {**t.MODELS, **t.OTHERS}
    names = opts.models.split(",") if opts.models else sorted(t.MODELS) + sorted(t.OTHERS)
    lines = ["| model | kernels | ATen ops compiled | max abs error vs eager | capture |",
             "|---|---:|---:|---:|---:|"]
    print("\n".join(lines), flush=True)
    for name in names:
        torch.manual_seed(0)
        inputs = t._inputs(name)
        try:
            line = row(name, factories[name], inputs)
        except Exception as exc:  # noqa: BLE001 - one model's failure is a row, not the end of the table
            line = f"| {name} | failed: {type(exc).__name__}: {str(exc).splitlines()[0][:80]} | | | |"
        print(line, flush=True)
        lines.append(line)
    if opts.out:
        head = ("# transformers architectures in default settings\n\n"
                "Tiny random configs (hidden 32, 2 layers, 4 heads, vocab 96; tests/test_transformers_defaults.py), "
                "fp32, target `interpret`. Decoders return their KV cache (DynamicCache), attention is SDPA. "
                "Error: largest absolute difference from eager over logits / last hidden state and every cached "
                "tensor. Capture: tracing and decomposition time of the first call.\n"
                "Written by `python -m uniorch.tools.transformers_table --out docs/perf/transformers_defaults.md`.\n\n")
        Path(opts.out).write_text(head + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
