"""PyTorch's OpInfo database as a test suite for uniorch (issue: breadth and robustness).

    python -m uniorch.tools.opinfo_coverage [--dtype float32] [--samples 2] [--ops abs,add,...]
                                            [--out docs/coverage/opinfo-float32.md] [--json FILE]

Every op of `torch.testing._internal.common_methods_invocations.op_db` with samples for the dtype on
CPU is compiled with `uniorch.compile(..., target="interpret")` per sample and compared with eager.
Each sample lands in one class:

  compiled   every captured ATen op ran in uniorch kernels, and the result matches eager
  partial    some ops fell back to eager (explain says which and why), and the result matches
  eager      nothing was compiled (capture or every region fell back), and the result matches
  random     the op is nondeterministic (random numbers, or uninitialized memory from `empty`);
             only shapes and dtypes are compared
  MISMATCH   a wrong answer: the compiled result differs from eager. Must never happen.
  error      uniorch raised where eager did not (a missing fallback)

Index outputs of ops that leave the order of equal values unspecified (sort, topk, median, ...)
match when gathering the input with them gives eager's values. Samples whose eager run raises
are not counted. A float32 or 16-bit sample that misses eager's result but is at least as close
to the same op in float64 counts as matching (Inductor's fp64-reference rule). The table lists per
op the counts per class and the first reason for each non-compiled sample.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import warnings
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field

import torch
import torch.utils._pytree as pytree

CLASSES = ("compiled", "partial", "eager", "random", "MISMATCH", "error")
TOL = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-7, 1e-7), torch.float16: (1e-3, 1e-3),
       torch.bfloat16: (1e-2, 1e-2)}


@dataclass
class SampleResult:
    op: str
    index: int
    cls: str
    reason: str = ""
    compiled_fraction: float = 0.0
    seconds: float = 0.0


def _clone(tree):
    return pytree.tree_map(lambda a: a.clone() if isinstance(a, torch.Tensor) else a, tree)


def _compare(got, ref, dtype) -> str:
    """'' when `got` matches `ref`, else what differs."""
    g_leaves, g_spec = pytree.tree_flatten(got)
    r_leaves, r_spec = pytree.tree_flatten(ref)
    if g_spec != r_spec:
        return f"output structure {g_spec} != eager's {r_spec}"
    for i, (g, r) in enumerate(zip(g_leaves, r_leaves)):
        if isinstance(r, torch.Tensor):
            if not isinstance(g, torch.Tensor) or g.shape != r.shape or g.dtype != r.dtype:
                return f"output {i}: {_desc(g)} vs eager {_desc(r)}"
            real = r.dtype.to_real() if r.dtype.is_complex else r.dtype  # complex: its parts' tolerance
            rtol, atol = TOL.get(real, (0, 0)) if real.is_floating_point else (0, 0)
            try:
                torch.testing.assert_close(g, r, rtol=rtol, atol=atol, equal_nan=True)
            except AssertionError as err:
                return f"output {i}: " + " ".join(str(err).split("\n")[1:3]).strip()
        elif isinstance(r, float) and isinstance(g, float):
            if not (abs(g - r) <= 1e-5 + 1e-4 * abs(r) or (g != g and r != r)):
                return f"output {i}: {g} vs eager {r}"
        elif g != r:
            return f"output {i}: {g!r} vs eager {r!r}"
    return ""


# ops whose index outputs PyTorch leaves unspecified among equal values (documented as such);
# argmax/max/cummax promise the first (or last) occurrence, so they are compared exactly
TIE_ORDER_FREE = {"sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian", "mode", "masked.median"}


def _ties_only(op_name: str, x, got, ref, dtype) -> bool:
    """Whether `got` differs from `ref` only in which of several equal values an index output
    names: gathering the input with either index gives the same values."""
    if op_name.split(".")[0] not in {n.split(".")[0] for n in TIE_ORDER_FREE} or not isinstance(x, torch.Tensor):
        return False
    g_leaves, r_leaves = pytree.tree_leaves(got), pytree.tree_leaves(ref)
    if len(g_leaves) != len(r_leaves):
        return False
    for g, r in zip(g_leaves, r_leaves):
        if not isinstance(r, torch.Tensor) or not isinstance(g, torch.Tensor) or g.shape != r.shape or g.dtype != r.dtype:
            return False
        if r.dtype != torch.int64:
            if _compare(g, r, dtype):  # values must match as they are
                return False
            continue
        if torch.equal(g, r):
            continue
        if not any(_same_gathered(x, g, r, d) for d in range(max(1, x.ndim))):
            return False
    return True


def _same_gathered(x, g, r, dim: int) -> bool:
    src = x if x.ndim else x.reshape(1)
    for gi, ri in ((g, r), (g.unsqueeze(dim), r.unsqueeze(dim)) if g.ndim == src.ndim - 1 else (g, r)):
        if gi.ndim != src.ndim or gi.numel() == 0:
            continue
        try:
            a, b = src.gather(dim, gi), src.gather(dim, ri)
        except (RuntimeError, IndexError):
            continue
        if torch.equal(a, b) or bool(((a == b) | (a.isnan() & b.isnan())).all()):
            return True
    return False


LOW_PRECISION = (torch.float16, torch.bfloat16, torch.float32)  # what the fp64 reference can judge


def _closer_to_fp64(fn, inputs, got, ref) -> bool:
    """Whether every float output of ours is at least as close as eager's to the same op run in
    float64 (Inductor's accuracy rule, `fp64_ref`): eager's CPU kernels for some 16-bit ops
    (grid_sampler, instance_norm) compute in 16 bits, uniorch in fp32 as their GPU kernels do,
    so the two differ by more than 16-bit tolerance while ours is the more accurate; and fp32
    results of ill-conditioned work (matrix_exp of a large-norm matrix) carry errors relative to
    the whole result, beyond an element-wise tolerance for both, whichever is more accurate."""
    up = pytree.tree_map(lambda a: a.double() if isinstance(a, torch.Tensor) and a.dtype in LOW_PRECISION
                         else a, _clone(inputs))
    try:
        exact = fn(*up)
    except Exception:  # noqa: BLE001 - no float64 kernel: no such reference
        return False
    g, r, e = pytree.tree_leaves(got), pytree.tree_leaves(ref), pytree.tree_leaves(exact)
    if not (len(g) == len(r) == len(e)):
        return False
    for a, b, x in zip(g, r, e):
        if not isinstance(b, torch.Tensor) or not b.dtype.is_floating_point:
            if isinstance(b, torch.Tensor) and not torch.equal(a, b):
                return False
            continue
        if not isinstance(a, torch.Tensor) or a.shape != b.shape or not isinstance(x, torch.Tensor):
            return False
        same_nan = torch.equal(a.isnan(), b.isnan()) and torch.equal(a.isinf(), b.isinf())
        finite = ~(b.isnan() | b.isinf())
        ours = (a.double() - x.double())[finite].abs().max() if finite.any() else torch.tensor(0.0)
        theirs = (b.double() - x.double())[finite].abs().max() if finite.any() else torch.tensor(0.0)
        if not same_nan or ours > 1.5 * theirs:
            return False
    return True


def _desc(t) -> str:
    return f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__


def _same_shapes(got, ref) -> str:
    g, r = pytree.tree_leaves(got), pytree.tree_leaves(ref)
    for a, b in zip(g, r):
        if isinstance(b, torch.Tensor) and (not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype):
            return f"{_desc(a)} vs eager {_desc(b)}"
    return "" if len(g) == len(r) else "output count differs"


def _seeded_random(cm, inputs) -> bool:
    """Whether the captured graph draws random numbers: uniorch's kernels do not replay eager's RNG
    stream (neither does Inductor by default), so only shapes and dtypes can be compared."""
    entry = cm.entry(_clone(inputs), {})
    if entry is None or entry.captured is None:
        return False
    return any(isinstance(n.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in n.target.tags
               for n in entry.captured.graph_module.graph.nodes)


# ops whose result is uninitialized memory: eager's values are garbage, so only shapes compare
UNINITIALIZED = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}


def _with_nonfinite(x):
    """A copy of a floating input with NaN, inf, -inf and -0.0 in its first four elements."""
    if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() >= 4):
        return x
    x = x.clone().contiguous()
    flat = x.view(-1)
    for i, v in enumerate((float("nan"), float("inf"), float("-inf"), -0.0)):
        flat[i] = v
    return x


def run_sample(op, index: int, sample, dtype, nonfinite: bool = False,
               target: str = "interpret") -> SampleResult | None:
    """`nonfinite`: the sample's input gets NaN, ±inf and -0.0 first (`_with_nonfinite`), so what
    PyTorch does with them is compared too (a clamp that turned NaN into its bound)."""
    import uniorch

    def fn(x, args, kwargs):
        return op(x, *args, **kwargs)

    inputs = (_with_nonfinite(sample.input) if nonfinite else sample.input, sample.args, sample.kwargs)
    torch.manual_seed(0)
    try:
        ref = fn(*_clone(inputs))
    except Exception:  # noqa: BLE001 - a sample eager rejects says nothing about uniorch
        return None
    torch.manual_seed(1)
    try:
        again = fn(*_clone(inputs))
        nondeterministic = bool(_compare(again, ref, dtype))
    except Exception:  # noqa: BLE001
        nondeterministic = True
    t = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cm = uniorch.compile(fn, target=target)
            got = cm(*_clone(inputs))
            rep = cm.explain(*_clone(inputs))
    except Exception as err:  # noqa: BLE001 - recorded as an error class
        return SampleResult(op.name, index, "error", f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}",
                            seconds=time.perf_counter() - t)
    secs = time.perf_counter() - t
    nondeterministic = nondeterministic or op.name in UNINITIALIZED or _seeded_random(cm, inputs)
    if nondeterministic:
        bad = _same_shapes(got, ref)
        why = rep.fallbacks[0] if rep.fallbacks else None
        note = bad or (f"{why.op} [{why.stage}] {why.why}"[:200] if why else "")
        return SampleResult(op.name, index, "MISMATCH" if bad else "random", note, rep.compiled_fraction, secs)
    bad = _compare(got, ref, dtype)
    if bad and _ties_only(op.name, inputs[0], got, ref, dtype):
        bad = ""
    if bad and dtype in LOW_PRECISION and _closer_to_fp64(fn, inputs, got, ref):
        bad = ""
    if bad:
        return SampleResult(op.name, index, "MISMATCH", bad, rep.compiled_fraction, secs)
    if rep.compiled_ops == rep.captured_ops and not rep.fallbacks:  # no ops at all: nothing runs eagerly
        return SampleResult(op.name, index, "compiled", "" if rep.captured_ops else "no ATen ops to run", 1.0, secs)
    why = rep.fallbacks[0] if rep.fallbacks else None
    reason = f"{why.op} [{why.stage}] {why.why}"[:200] if why else ("no ATen ops captured" if not rep.captured_ops else "")
    cls = "eager" if rep.compiled_ops == 0 else "partial"
    return SampleResult(op.name, index, cls, reason, rep.compiled_fraction, secs)


def _ops(dtype, names):
    from torch.testing._internal.common_methods_invocations import op_db

    ops = [o for o in op_db if dtype in o.supported_dtypes("cpu")]
    if names:
        wanted = set(names)
        ops = [o for o in ops if o.name in wanted or f"{o.name}.{o.variant_test_name}" in wanted]
    return ops


def run(dtype, samples: int, names=None, log=sys.stderr, journal: str | None = None, nonfinite: bool = False,
        target: str = "interpret") -> list[SampleResult]:
    """`journal`: a JSON-lines file every result is appended to as it comes; ops already in it are
    not run again, so a long run that was cut off resumes where it stopped."""
    results: list[SampleResult] = []
    done: set[str] = set()
    started: set[str] = set()
    if journal and os.path.exists(journal):
        with open(journal) as f:
            for line in f:
                if not line.strip():
                    continue
                rec = json.loads(line)
                if "started" in rec:  # its result never came: it killed the process
                    started.add(rec["started"])
                    continue
                if "finished" in rec:  # no sample counted (e.g. eager rejects every one)
                    done.add(rec["finished"])
                    continue
                r = SampleResult(**rec)
                results.append(r)
                done.add(r.op)
    for label in sorted(started - done):
        results.append(SampleResult(label, 0, "error", "crashed the process (a signal inside a native library)"))
        done.add(label)
    for op in _ops(dtype, names):
        label = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if label in done:
            continue
        if journal:
            with open(journal, "a") as f:
                f.write(json.dumps({"started": label}) + "\n")
        try:
            it = op.sample_inputs("cpu", dtype, requires_grad=False)
            picked = []
            for i, s in enumerate(it):
                if i >= samples:
                    break
                picked.append(s)
        except Exception as err:  # noqa: BLE001
            print(f"{label}: cannot make samples: {err}", file=log)
            continue
        counted = len(results)
        for i, s in enumerate(picked):
            try:
                r = run_sample(op, i, s, dtype, nonfinite, target)
            except Exception:  # noqa: BLE001 - the harness must get through the whole database
                r = SampleResult(label, i, "error", "harness: " + traceback.format_exc(limit=1).splitlines()[-1])
            if r is None:
                continue
            r.op = label
            results.append(r)
            if journal:
                with open(journal, "a") as f:
                    f.write(json.dumps(asdict(r)) + "\n")
            print(f"{label}[{i}]: {r.cls} {r.reason[:120]} ({r.seconds:.1f}s)", file=log, flush=True)
        if journal and len(results) == counted:
            with open(journal, "a") as f:
                f.write(json.dumps({"finished": label}) + "\n")
    return results


def table(results: list[SampleResult], dtype, samples: int, target: str = "interpret", nonfinite: bool = False) -> str:
    by_op: dict[str, list[SampleResult]] = defaultdict(list)
    for r in results:
        by_op[r.op].append(r)
    total = Counter(r.cls for r in results)
    n = len(results)
    full = total["compiled"] + sum(1 for r in results if r.cls == "random" and r.compiled_fraction == 1.0)
    flags = (f" --target {target}" if target != "interpret" else "") + (" --nonfinite" if nonfinite else "")
    lines = [f"# OpInfo coverage, {str(dtype).removeprefix('torch.')}, target {target}"
             + (", NaN, ±inf and -0.0 in each input" if nonfinite else ""), "",
             f"Generated by `python -m uniorch.tools.opinfo_coverage --dtype {str(dtype).removeprefix('torch.')} "
             f"--samples {samples}{flags}` (first {samples} samples per op of PyTorch's OpInfo database).", "",
             f"{n} samples over {len(by_op)} ops: " + ", ".join(f"{c} {total[c]} ({100 * total[c] / max(1, n):.1f}%)"
                                                            for c in CLASSES), "",
             f"Compiled with nothing left to PyTorch, random ops (shape-compared) included: {full} "
             f"({100 * full / max(1, n):.1f}%).", "",
             "| op | " + " | ".join(CLASSES) + " | first reason when not compiled |",
             "|---|" + "---|" * len(CLASSES) + "---|"]
    for op in sorted(by_op):
        rs = by_op[op]
        c = Counter(r.cls for r in rs)
        reason = next((r.reason for r in rs if r.cls != "compiled" and r.reason), "")
        reason = reason.replace("|", "\\|").replace("\n", " ")[:160]
        lines.append(f"| {op} | " + " | ".join(str(c[k]) if c[k] else "" for k in CLASSES) + f" | {reason} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m uniorch.tools.opinfo_coverage", description=__doc__.split("\n\n")[0])
    p.add_argument("--dtype", default="float32")
    p.add_argument("--samples", type=int, default=2, help="samples per op (the first N OpInfo yields)")
    p.add_argument("--ops", default="", help="comma-separated op names (default: all)")
    p.add_argument("--out", default=None, help="markdown table (default docs/coverage/opinfo-<dtype>.md)")
    p.add_argument("--json", default=None, help="also write every sample's result as JSON")
    p.add_argument("--journal", default=None, help="JSON-lines log of results; a rerun resumes after the ops in it")
    p.add_argument("--nonfinite", action="store_true", help="NaN, inf, -inf and -0.0 written into each sample's input")
    p.add_argument("--target", default="interpret", help="the target compiled for (default interpret)")
    a = p.parse_args(argv)
    dtype = getattr(torch, a.dtype)
    results = run(dtype, a.samples, [s for s in a.ops.split(",") if s], journal=a.journal, nonfinite=a.nonfinite,
                  target=a.target)
    out = a.out or os.path.join("docs", "coverage", f"opinfo-{a.dtype}{'-nonfinite' if a.nonfinite else ''}.md")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        f.write(table(results, dtype, a.samples, a.target, a.nonfinite))
    if a.json:
        with open(a.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=0)
    total = Counter(r.cls for r in results)
    print(f"{len(results)} samples: " + ", ".join(f"{c} {total[c]}" for c in CLASSES) + f"; table: {out}")
    return 1 if total["MISMATCH"] else 0


if __name__ == "__main__":
    sys.exit(main())
