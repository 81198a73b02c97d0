"""Pass pipelines that mix upstream MLIR passes and uniorch passes in one text.

    -p 'uniorch-torch-to-linalg, func.func(canonicalize, cse), uniorch-op-stats{group-by=module}'

The text uses MLIR's pipeline syntax. Top-level elements run one after another on the module; an
anchored group such as `func.func(a, b)` is split into `func.func(a)`, `func.func(b)`, which
computes the same result and lets IR printing and timing name each pass. Names that uniorch
registers run as Python passes; everything else goes to MLIR's PassManager, so any upstream or
torch-mlir pass or pipeline registered in the bindings works.
"""
from __future__ import annotations

import contextlib
import difflib
import functools
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Optional, TextIO

from torch_mlir import ir
from torch_mlir.passmanager import PassManager

from uniorch.errors import PipelineError

from . import registry
from .base import Pass, PassContext


@dataclass(frozen=True)
class Element:
    """One step of a pipeline: a uniorch pass, or upstream pipeline text for MLIR's PassManager."""

    text: str
    uniorch: Optional[Pass] = None

    @property
    def names(self) -> set[str]:
        """Pass names this step answers to in --print-ir-before/after (anchor and inner pass)."""
        if self.uniorch is not None:
            return {self.uniorch.name}
        return set(re.findall(r"[A-Za-z_][\w.\-]*", re.sub(r"\{[^}]*\}", "", self.text)))

    @property
    def label(self) -> str:
        return self.uniorch.pipeline_text() if self.uniorch else self.text


def split_top_level(text: str) -> list[str]:
    items, depth, cur, quote = [], 0, [], None
    for ch in text:
        if quote:
            cur.append(ch)
            quote = None if ch == quote else quote
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
            if depth < 0:
                raise PipelineError(f"unbalanced '{ch}' in pass pipeline '{text}'")
        if ch == "," and depth == 0:
            items.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if depth != 0 or quote:
        raise PipelineError(f"unbalanced brackets or quotes in pass pipeline '{text}'")
    items.append("".join(cur).strip())
    return [i for i in items if i]


_HEAD = re.compile(r"^\s*([A-Za-z_][\w.\-]*)\s*(.*)$", re.S)


def parse_pipeline(text: str, ctx: ir.Context) -> list[Element]:
    text = text.strip()
    m = re.fullmatch(r"builtin\.module\s*\((.*)\)", text, re.S)
    if m:
        text = m.group(1)
    elements: list[Element] = []
    for item in split_top_level(text):
        head = _HEAD.match(item)
        if not head:
            raise PipelineError(f"cannot parse pass pipeline element '{item}'")
        name, rest = head.group(1), head.group(2).strip()
        if rest.startswith("("):  # anchored group, e.g. func.func(canonicalize, cse)
            if not rest.endswith(")"):
                raise PipelineError(f"cannot parse pass pipeline element '{item}'")
            for inner in split_top_level(rest[1:-1]):
                inner_name = _HEAD.match(inner).group(1) if _HEAD.match(inner) else inner
                if registry.is_registered(inner_name):
                    raise PipelineError(f"'{inner_name}' is a uniorch pass and runs on the whole module; "
                                        f"put it at the top level of the pipeline, not inside '{name}(...)'")
                elements.append(_upstream(f"{name}({inner})", ctx))
        elif registry.is_registered(name):
            if rest and not (rest.startswith("{") and rest.endswith("}")):
                raise PipelineError(f"cannot parse options of '{name}': '{rest}'")
            elements.append(Element(item, registry.get(name).from_options(rest[1:-1] if rest else "")))
        else:
            elements.append(_upstream(item, ctx))
    return elements


def _upstream(text: str, ctx: ir.Context) -> Element:
    with _llvm_stderr() as llvm:
        try:
            PassManager.parse(f"builtin.module({text})", ctx)
            failed = None
        except ValueError as err:
            failed = str(err)
    if failed is not None:
        raise PipelineError(_explain_upstream_error(text, failed, llvm.text)) from None
    return Element(text)


class _Captured:
    text = ""


@contextlib.contextmanager
def _llvm_stderr():
    """Collects what LLVM writes straight to the process's stderr (fd 2) meanwhile.

    LLVM's option parser reports a bad option value (`canonicalize{max-iterations=abc}`) there, as
    ": for the --max-iterations option: 'abc' value invalid for long argument!", and the ValueError
    then only says "failed to add `canonicalize`". Caught, that reason becomes part of our one
    diagnostic instead of a stray line without the `uniorch-opt: error:` prefix.
    """
    got = _Captured()
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no fd 2 to redirect: let LLVM write where it writes
        yield got
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield got
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            got.text = tmp.read().decode("utf-8", "replace")


def _explain_upstream_error(text: str, mlir_message: str, llvm_text: str = "") -> str:
    m = re.search(r"'([^']+)' does not refer to a registered pass", mlir_message)
    if m:
        unknown = m.group(1)
        known = registry.names() + upstream_pass_names()
        close = difflib.get_close_matches(unknown, known, n=4, cutoff=0.6)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        return (f"unknown pass or pipeline '{unknown}'{hint} uniorch passes: {', '.join(registry.names())}; "
                f"`uniorch-opt --list-passes` lists the upstream ones too")
    lines = [line.strip().removeprefix(": ") for line in (llvm_text + "\n" + mlir_message).splitlines()]
    detail = " ".join(line for line in lines if line and line != "^")
    return f"invalid pass pipeline element '{text}': {detail}"


@functools.cache
def upstream_pass_names() -> list[str]:
    """Upstream/torch-mlir pass names, read from torch-mlir's opt binary help when the wheel has it.

    The Python bindings register more passes than that binary lists; this is for suggestions and
    --list-passes only, never to reject a name MLIR accepts.
    """
    return [name for name, _ in upstream_passes()]


@functools.cache
def upstream_passes() -> list[tuple[str, str]]:
    from torch_mlir import _mlir_libs

    binary = os.path.join(os.path.dirname(_mlir_libs.__file__), "torch-mlir-opt")
    try:
        text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    section = text.split("Passes:", 1)[-1].split("--pass-pipeline", 1)[0]
    return re.findall(r"^ {6}--([\w.\-]+)\s+-\s+(.*)$", section, re.M)


@dataclass
class Instrumentation:
    """mlir-opt's IR printing and timing, applied per pipeline element."""

    print_after_all: bool = False
    print_before: set[str] = field(default_factory=set)
    print_after: set[str] = field(default_factory=set)
    debuginfo: bool = False
    timing: Optional["Timing"] = None
    out: Optional[TextIO] = None

    def dump(self, when: str, element: Element, module: ir.Module) -> None:
        print(f"// -----// IR Dump {when} {element.label} //----- //", file=self.out)
        print(module.operation.get_asm(enable_debug_info=self.debuginfo), file=self.out)


class Timing:
    """Wall time per named step, reported in mlir-opt's --mlir-timing layout."""

    def __init__(self):
        self.rows: list[tuple[str, float]] = []

    def record(self, name: str, seconds: float) -> None:
        self.rows.append((name, seconds))

    def report(self) -> str:
        total = sum(s for _, s in self.rows) or 1e-12
        bar = "===" + "-" * 73 + "==="
        lines = [bar, "                         ... Execution time report ...", bar,
                 f"  Total Execution Time: {total:.4f} seconds", "", "  ----Wall Time----  ----Name----"]
        lines += [f"  {s:8.4f} ({100 * s / total:5.1f}%)  {name}" for name, s in self.rows]
        lines.append(f"  {total:8.4f} (100.0%)  Total")
        return "\n".join(lines)


def run_pipeline(module: ir.Module, elements: list[Element], pctx: PassContext,
                 inst: Optional[Instrumentation] = None) -> None:
    inst = inst or Instrumentation()
    inst.out = inst.out or pctx.out
    for element in elements:
        if element.names & inst.print_before:
            inst.dump("Before", element, module)
        start = time.perf_counter()
        if element.uniorch is not None:
            element.uniorch.run(module, pctx)
            _verify(module, element.label)
        else:
            from uniorch.ir.stages import run_pipeline_text

            run_pipeline_text(module, f"builtin.module({element.text})", element.text)
        if inst.timing is not None:
            inst.timing.record(element.label, time.perf_counter() - start)
        if inst.print_after_all or element.names & inst.print_after:
            inst.dump("After", element, module)


def _verify(module: ir.Module, label: str) -> None:
    """Our passes build IR through the Python bindings, which check nothing as it is built: a pass
    that leaves invalid IR is named here, not found later as a wrong kernel."""
    try:
        ok = module.operation.verify()
    except ir.MLIRError as err:
        raise RuntimeError(f"{label} left invalid IR: {err}") from None
    if not ok:
        raise RuntimeError(f"{label} left invalid IR")
