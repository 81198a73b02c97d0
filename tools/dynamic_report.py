"""Compile counts and first-call times, static against symbolic sizes (docs/perf/dynamic_shapes.md).

    python -m uniorch.tools.dynamic_report [--target cuda] [--quick] [--modes static,automatic,true] [--out F]

Each decoder is called at 16 sequence lengths from 5 to 300 (`--quick`: 5 to 64, what Triton's
interpreter runs in minutes: its cost grows with the length squared) with batch sizes 1 to 8, once with
`dynamic=False` (a compile per shape), once as `uniorch.compile` is by default (automatic dynamic:
a symbolic compile once a size changes, which also serves a batch of 1 where the program at 1 is
the same: runtime/size_one.py) and once with `dynamic=True`, every output checked against eager; then
`generate` over 64 new tokens. A row gives compiles, the time of the calls that compiled, and the
largest error against eager.
"""
from __future__ import annotations

import argparse
import time
import warnings

import torch

LENGTHS = [5, 9, 17, 24, 33, 48, 64, 80, 100, 128, 150, 180, 200, 240, 270, 300]
QUICK_LENGTHS = [5, 6, 7, 9, 11, 13, 16, 19, 23, 27, 32, 37, 43, 49, 56, 64]
BATCHES = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8]


def _llama_block():
    from uniorch.testing import zoo

    model, args, _ = zoo.load("llama_block")
    start = args[1]
    return model, lambda b, t: ((torch.randn(b, t, 32), start), {}), lambda out: out


def _hf_llama():
    import transformers

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    model = transformers.LlamaForCausalLM(cfg).eval()
    return model, lambda b, t: ((), {"input_ids": torch.randint(0, 96, (b, t))}), lambda out: out.logits


MODES = {"static": False, "automatic": None, "true": True}
MODELS = {"llama_block (zoo)": _llama_block, "transformers Llama (SDPA, DynamicCache)": _hf_llama}


def run_shapes(name: str, dynamic, target: str, lengths: list[int]) -> dict:
    import uniorch

    model, make, pick = MODELS[name]()
    cm = uniorch.compile(model, target=target, dynamic=dynamic, cache_size_limit=64)
    compile_s, first, worst, seen = 0.0, None, 0.0, 0
    for b, t in zip(BATCHES, lengths):
        args, kwargs = make(b, t)
        before = cm.cache_size
        start = time.perf_counter()
        with torch.no_grad():
            got = pick(cm(*args, **kwargs))
        took = time.perf_counter() - start
        if cm.cache_size > before:
            compile_s += took
            first = took if first is None else first
        with torch.no_grad():
            ref = pick(model(*args, **kwargs))
        worst = max(worst, (got - ref).abs().max().item())
        seen += 1
    mode = {False: "static (dynamic=False)", None: "automatic dynamic (default)", True: "dynamic=True"}[dynamic]
    return {"model": name, "mode": mode, "calls": seen,
            "lengths": f"{min(lengths)}-{max(lengths)}",
            "compiles": cm.cache_size, "first_call_s": round(first or 0.0, 2), "compiling_calls_s": round(compile_s, 1),
            "max_abs_err": worst}


def run_generate(target: str, tokens: int = 64) -> dict:
    import uniorch

    model, _, _ = _hf_llama()
    cm = uniorch.compile(model, target=target)
    ids = torch.randint(0, 96, (1, 5))
    start = time.perf_counter()
    with torch.no_grad():
        got = cm.generate(ids, max_new_tokens=tokens, do_sample=False)
    took = time.perf_counter() - start
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=tokens, do_sample=False)
    return {"model": "transformers Llama generate", "tokens": tokens, "compiles": cm.cache_size,
            "seconds": round(took, 1), "same_tokens": bool(torch.equal(got, ref))}


def markdown(rows: list[dict], gen: dict, target: str, lengths: list[int], quick: bool, modes: str) -> str:
    flags = (" --quick" if quick else "") + (f" --modes {modes}" if modes != "static,automatic,true" else "")
    lines = ["# Dynamic shapes: compiles and first-call times", "",
             f"Written by `python -m uniorch.tools.dynamic_report --target {target}{flags}` "
             f"(torch {torch.__version__}). Each model is called at {len(lengths)} sequence lengths ({lengths[0]} to "
             f"{lengths[-1]}) with batch sizes 1 to 8 in turn; 'compiling calls' is the time of the calls that "
             f"compiled (capture, passes, codegen, the trial launch and the call itself).", "",
             "| model | mode | calls | compiles | first call (s) | compiling calls (s) | max abs err vs eager |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['mode']} | {r['calls']} | {r['compiles']} | {r['first_call_s']} | "
                     f"{r['compiling_calls_s']} | {r['max_abs_err']:.1e} |")
    lines += ["", f"`generate` over {gen['tokens']} new tokens (transformers Llama, automatic dynamic): "
                  f"{gen['compiles']} compiles, {gen['seconds']} s, tokens {'equal to' if gen['same_tokens'] else 'DIFFERENT from'} eager's.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="interpret")
    p.add_argument("--quick", action="store_true", help="lengths 5 to 64 (the interpreter's budget)")
    p.add_argument("--out", default=None, help="write the markdown table here")
    p.add_argument("--modes", default="static,automatic,true",
                   help="which compiles to run: static (a compile per shape: at lengths to 300 on the interpreter, "
                        "the longest part), automatic (the default), true (dynamic=True)")
    a = p.parse_args(argv)
    modes = [MODES[m.strip()] for m in a.modes.split(",") if m.strip()]
    warnings.simplefilter("ignore")
    lengths = QUICK_LENGTHS if a.quick else LENGTHS
    rows = []
    for name in MODELS:
        for dynamic in modes:
            rows.append(run_shapes(name, dynamic, a.target, lengths))
            print(rows[-1], flush=True)
    gen = run_generate(a.target)
    print(gen, flush=True)
    text = markdown(rows, gen, a.target, lengths, a.quick, a.modes)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
