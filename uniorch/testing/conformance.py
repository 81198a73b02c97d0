"""The backend conformance kit: what a vendor runs against its plugin before shipping it.

    python -m uniorch.testing.conformance --target NAME[:ARCH] [--target ...] [--compile-only]

For each target it checks the plugin's contract (registered under its name, `is_available()`
answers without raising, `unavailable_reason()` names what is missing, options are a frozen,
hashable dataclass, stage names are usable as file suffixes, `load` without a device raises
`BackendError`), then compiles the standard kernel set (`kernels.py`) through TTIR and every
declared stage with `uniorch.backends.driver.compile_kernel`, checking each stage ran, in order,
with non-empty output. Where the device is present it also runs the set with
`uniorch.compile(fn, target=...)`: no kernel may fall back to eager, and outputs on fresh random
inputs must match eager PyTorch (fp32 rel err ≤ 1e-4, bf16/fp16 ≤ 1e-2, integers exact).

Prints one PASS / FAIL / SKIP row per check; exits 0 iff nothing FAILed.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Iterable, Optional

from .kernels import CASES, TOLERANCE, Case, rel_err

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass
class Result:
    check: str
    subject: str
    status: str
    detail: str = ""


class _Report:
    def __init__(self):
        self.results: list[Result] = []

    def add(self, check: str, subject: str, status: str, detail: str = "") -> bool:
        self.results.append(Result(check, subject, status, detail))
        return status != FAIL

    def guard(self, check: str, subject: str, fn, ok_detail=lambda v: "") -> tuple[bool, object]:
        """Runs `fn`; an exception is this check's FAIL (with its message), never a crash."""
        try:
            value = fn()
            detail = ok_detail(value)
        except Exception as err:  # noqa: BLE001 - the kit reports, it does not stop
            return self.add(check, subject, FAIL, _why(err)), None
        return self.add(check, subject, PASS, detail), value


def _why(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}".strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


# -- the plugin's contract -------------------------------------------------------------------------
def check_contract(rep: _Report, backend) -> bool:
    """Contract checks that need no kernel; False when compiling cannot go on."""
    from uniorch.backends.driver import FRONT_STAGES, stage_names
    from uniorch.backends.sdk import KernelOptions

    cls = type(backend)
    rep.add("contract", "name/archs", PASS if cls.name and cls.archs else FAIL,
            f"name={cls.name!r} archs={list(cls.archs)}")
    ok, avail = rep.guard("contract", "is_available()", cls.is_available, lambda v: repr(v))
    if ok and not isinstance(avail, bool):
        rep.results[-1] = Result("contract", "is_available()", FAIL, f"returned {avail!r}, not a bool")
    ok, reason = rep.guard("contract", "unavailable_reason()", cls.unavailable_reason, lambda v: repr(v)[:120])
    if ok and (not isinstance(reason, str) or (avail is False and not reason.strip())):
        rep.results[-1] = Result("contract", "unavailable_reason()", FAIL,
                                 f"{reason!r}: must be a string naming what is missing when unavailable")

    def options():
        opts = backend.parse_options({})
        if not isinstance(opts, cls.options_class):
            raise TypeError(f"parse_options returned {type(opts).__name__}, not {cls.options_class.__name__}")
        if not (dataclasses.is_dataclass(opts) and type(opts).__dataclass_params__.frozen):
            raise TypeError(f"{type(opts).__name__} is not a frozen dataclass")
        try:
            setattr(opts, dataclasses.fields(opts)[0].name, None)
            raise TypeError(f"{type(opts).__name__} accepted an attribute assignment")
        except dataclasses.FrozenInstanceError:
            pass
        again = backend.parse_options({})
        if hash(opts) != hash(again) or opts.hash() != again.hash() or not isinstance(opts.hash(), str):
            raise TypeError("equal options hash differently (the stage cache key would be unstable)")
        changed = backend.parse_options({"num_warps": opts.num_warps * 2})
        if changed.hash() == opts.hash():
            raise TypeError("options.hash() ignores num_warps")
        return opts

    rep.guard("contract", "options dataclass", options,
              lambda o: f"{type(o).__name__} frozen, hash {o.hash()}"
              + ("" if isinstance(o, KernelOptions) else " (not a KernelOptions subclass)"))

    ok, names = rep.guard("contract", "declared stages", lambda: stage_names(backend), lambda v: " → ".join(v))
    if not ok:
        return False
    bad = [s for s in names if not s or not s.replace("_", "").isalnum()]
    if list(names[: len(FRONT_STAGES)]) != list(FRONT_STAGES) or len(set(names)) != len(names) or bad:
        rep.results[-1] = Result("contract", "declared stages", FAIL,
                                 f"{names}: must start with {list(FRONT_STAGES)}, be unique, and be identifiers "
                                 f"(they name files){'; bad: ' + str(bad) if bad else ''}")
        return False
    if cls.binary_stage is not None:
        rep.add("contract", "binary_stage", PASS if cls.binary_stage in names else FAIL,
                f"{cls.binary_stage!r}" + ("" if cls.binary_stage in names else " is not a declared stage"))
    return True


# -- compiling the kernel set ----------------------------------------------------------------------
def _kernels(case: Case, target):
    """The case's generated kernels for `target`: [(KernelSource | None, why-not)]."""
    from torch_mlir import ir

    from uniorch.codegen import generate
    from uniorch.ir import to_mlir
    from uniorch.runtime.compiler import kernel_functions, to_kernel_stage

    module = to_mlir(case.fn, case.make_inputs())
    to_kernel_stage(module, "scheduled", target)
    out = []
    for op in kernel_functions(module):
        if "uniorch.unsupported" in op.attributes:
            out.append((None, ir.StringAttr(op.attributes["uniorch.unsupported"]).value))
        else:
            out.append((generate(op, str(target)), ""))
    return out


def check_compile(rep: _Report, backend, target, cases: Iterable[Case]) -> Optional[object]:
    """Compiles every case through every declared stage; returns one KernelSource for later checks."""
    from uniorch.backends.driver import compile_kernel, stage_names

    names = stage_names(backend)
    sample = None
    for case in cases:
        try:
            kernels = _kernels(case, target)
        except Exception as err:  # noqa: BLE001 - uniorch's side failed: not the plugin's fault
            rep.add("compile", case.name, SKIP, f"uniorch could not build the kernel: {_why(err)}")
            continue
        made = [ks for ks, _ in kernels if ks is not None]
        if not made:
            rep.add("compile", case.name, SKIP, "uniorch produced no kernel: " + "; ".join(w for _, w in kernels))
            continue
        problems, sizes = [], []
        t = time.perf_counter()
        for ks in made:
            try:
                ck = compile_kernel(ks, backend, use_cache=False)  # run the stages, not a cached copy
            except Exception as err:  # noqa: BLE001
                problems.append(f"{ks.name}: {_why(err)}")
                continue
            if list(ck.asm) != names:
                problems.append(f"{ks.name}: stages ran {list(ck.asm)}, declared {names}")
            empty = [s for s, v in ck.asm.items() if not v]
            if empty:
                problems.append(f"{ks.name}: empty output from {empty}")
            sizes.append(ck.asm[names[-1]])
            sample = sample or ks
        detail = "; ".join(problems) if problems else \
            f"{len(made)} kernel(s), {names[-1]} {sum(len(s) for s in sizes)} B, {time.perf_counter() - t:.1f}s"
        if len(made) < len(kernels):  # uniorch's gap, not the plugin's: note it, do not fail it
            detail += f" ({len(kernels) - len(made)} kernel(s) uniorch could not generate)"
        rep.add("compile", case.name, FAIL if problems else PASS, detail)
    return sample


def check_load_refused(rep: _Report, backend, ks) -> None:
    """Without its device, `load` must refuse with BackendError (a clear message, no crash)."""
    from uniorch.backends.sdk import BackendError

    try:
        backend.load(ks)
    except BackendError as err:
        rep.add("contract", "load() without device", PASS, f"BackendError: {str(err)[:100]}")
        return
    except Exception as err:  # noqa: BLE001
        rep.add("contract", "load() without device", FAIL, f"raised {_why(err)}, not BackendError")
        return
    rep.add("contract", "load() without device", FAIL, "is_available() is False but load() succeeded")


# -- running it ------------------------------------------------------------------------------------
def check_run(rep: _Report, backend, target, cases: Iterable[Case]) -> None:
    import torch
    import torch.utils._pytree as pytree

    import uniorch

    device = backend.device_type
    for case in cases:
        try:
            cm = uniorch.compile(case.fn, target=str(target))
            first = tuple(a.to(device) for a in case.make_inputs())
            report = cm.explain(*first)
            if not report.kernels or report.fallbacks:
                why = "; ".join(f"{f.op} [{f.stage}] {f.why}" for f in report.fallbacks)[:300] or "no kernels"
                rep.add("run", case.name, FAIL, f"ran eagerly: {why}")
                continue
            args = case.make_inputs()  # fresh inputs: the kernels, not a cached answer, are checked
            want = pytree.tree_leaves(case.fn(*args))
            with torch.no_grad():
                got = pytree.tree_leaves(cm(*(a.to(device) for a in args)))
        except Exception as err:  # noqa: BLE001
            rep.add("run", case.name, FAIL, _why(err))
            continue
        worst, problems = 0.0, []
        for i, (g, w) in enumerate(zip(got, want)):
            g = g.cpu()
            if w.dtype.is_floating_point:
                err = rel_err(g, w)
                worst = max(worst, err)
                if err > TOLERANCE.get(w.dtype, 1e-4):
                    problems.append(f"output {i} ({w.dtype}) rel err {err:.2e} > {TOLERANCE.get(w.dtype, 1e-4):.0e}")
            elif not torch.equal(g, w):
                problems.append(f"output {i} ({w.dtype}) differs from eager")
        if len(got) != len(want):
            problems.append(f"{len(got)} outputs, eager gives {len(want)}")
        rep.add("run", case.name, FAIL if problems else PASS,
                "; ".join(problems) or f"{len(report.kernels)} kernel(s), max rel err {worst:.1e}")


def check_symbolic_run(rep: _Report, backend, target) -> None:
    """Kernels compiled with symbolic sizes (dynamic=True, a second batch size in training,
    generate) take `launcher(inputs, outputs, sizes)` and a grid computed per call: a launcher
    written for static kernels only runs every kernel of such a model eagerly."""
    import torch

    import uniorch

    device = backend.device_type

    def fn(x, w):
        return torch.softmax(x @ w, -1)

    try:
        cm = uniorch.compile(fn, target=str(target), dynamic=True)
        problems, kernels = [], 0
        for rows in (13, 29):
            x, w = torch.randn(rows, 24), torch.randn(24, 40)
            report = cm.explain(x.to(device), w.to(device))
            if not report.symbolic or not report.kernels or report.fallbacks:
                why = "; ".join(f"{f.op} [{f.stage}] {f.why}" for f in report.fallbacks)[:300]
                problems.append(f"{rows} rows ran eagerly: {why or 'no symbolic kernels'}")
                break
            kernels = len(report.kernels)
            with torch.no_grad():
                err = rel_err(cm(x.to(device), w.to(device)).cpu(), fn(x, w))
            if err > TOLERANCE[torch.float32]:
                problems.append(f"{rows} rows: rel err {err:.2e}")
    except Exception as err:  # noqa: BLE001
        rep.add("run", "symbolic sizes", FAIL, _why(err))
        return
    if problems and _old_interpreter(problems):
        rep.add("run", "symbolic sizes", SKIP, "Triton's interpreter before 3.7 needs integer loop bounds; "
                "a compiled kernel takes them as arguments")
        return
    rep.add("run", "symbolic sizes", FAIL if problems else PASS,
            "; ".join(problems) or f"{kernels} kernel(s) at 13 and 29 rows, one compile")


def _old_interpreter(problems: list) -> bool:
    """Kernels run on Triton's interpreter, which before 3.7 cannot loop to a bound passed as an
    argument (the GPU machine's Triton 3.6 compiles them, where it can)."""
    import triton

    old = tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7)
    return old and all("InterpreterError" in p for p in problems)


# -- driver ----------------------------------------------------------------------------------------
def run(target_text: str, cases: Iterable[Case] = CASES, compile_only: bool = False) -> list[Result]:
    """All checks for one target; never raises (a failure is a FAIL row)."""
    from uniorch.targets import parse_target

    rep = _Report()
    cases = list(cases)
    ok, target = rep.guard("contract", "registered", lambda: parse_target(target_text),
                           lambda t: f"{t} → {_class_of(t.vendor)}")
    if not ok:
        return rep.results
    ok, backend = rep.guard("contract", "instantiate", lambda: target.backend, repr)
    if not ok:
        return rep.results
    if not check_contract(rep, backend):
        return rep.results
    sample = check_compile(rep, backend, target, cases)
    try:
        available = bool(type(backend).is_available())
    except Exception:  # noqa: BLE001 - already a FAIL row above
        available = False
    if not available:
        if sample is not None:
            check_load_refused(rep, backend, sample)
        rep.add("run", f"all {len(cases)} cases", SKIP, f"no device: {type(backend).unavailable_reason()}")
    elif compile_only:
        rep.add("run", f"all {len(cases)} cases", SKIP, "--compile-only")
    else:
        check_run(rep, backend, target, cases)
        check_symbolic_run(rep, backend, target)
    return rep.results


def _class_of(vendor: str) -> str:
    from uniorch.backends.registry import get

    cls = get(vendor)
    return f"{cls.__module__}.{cls.__qualname__}"


def format_table(target: str, results: list[Result]) -> str:
    w1 = max([len(r.check) for r in results] + [5])
    w2 = max([len(r.subject) for r in results] + [7])
    lines = [f"uniorch conformance: target {target}", f"{'check':<{w1}}  {'subject':<{w2}}  status  detail"]
    lines += [f"{r.check:<{w1}}  {r.subject:<{w2}}  {r.status:<6}  {r.detail}" for r in results]
    counts = {s: sum(r.status == s for r in results) for s in (PASS, FAIL, SKIP)}
    lines.append(f"{target}: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m uniorch.testing.conformance",
                                description="Check a uniorch backend plugin against the SDK contract.")
    p.add_argument("--target", action="append", required=True,
                   help="vendor[:arch] to check (a registered backend); repeat for several")
    p.add_argument("--compile-only", action="store_true", help="skip running kernels even where a device is present")
    p.add_argument("--cases", default="", help=f"comma-separated subset of: {', '.join(c.name for c in CASES)}")
    args = p.parse_args(argv)
    cases = list(CASES)
    if args.cases:
        wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
        unknown = [w for w in wanted if w not in {c.name for c in CASES}]
        if unknown:
            p.error(f"unknown case(s) {unknown}; known: {', '.join(c.name for c in CASES)}")
        cases = [c for c in CASES if c.name in wanted]
    failed = False
    for target in args.target:
        try:
            results = run(target, cases, args.compile_only)
        except Exception:  # noqa: BLE001 - a kit bug: say so loudly, and fail
            traceback.print_exc()
            results = [Result("kit", "internal error", FAIL, "see traceback above")]
        print(format_table(target, results), flush=True)
        print()
        failed |= any(r.status == FAIL for r in results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
