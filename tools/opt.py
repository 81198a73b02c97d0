"""uniorch-opt: mlir-opt's conventions over uniorch's graph.

    uniorch-opt INPUT [-p PIPELINE] [--emit STAGE] [--target T] [-o OUT] [--split-input-file]
                [--print-ir-after-all] [--print-ir-before=P] [--print-ir-after=P] [--timing]
                [--mlir-print-debuginfo] [--dump-dir DIR] [--list-passes] [--list-targets]

INPUT is a .mlir file, `-` for stdin, a `.onnx` model, or `model.py:factory` where factory()
returns (model, example_args[, example_kwargs]). The input is brought to `--emit`'s stage (a Python model
defaults to linalg, MLIR text stays as it is), then the pipeline runs, then the module is printed. A
scheduled input (kernels outlined: `--emit scheduled` output, a bundle) keeps its kernels.

Stages: torch, linalg, fused, scheduled print the module; every later stage is per kernel, for
`--target` (default interpret): triton, ttir, then the target's backend's own stages, e.g.
cuda: ttgir, llir, ptx, cubin; rocm: ttgir, llir, amdgcn, hsaco (`--list-targets` shows them).
GPU targets cross-compile here with no GPU. Text stages print every kernel under a
`// ===== kN_name =====` header; a binary stage (cubin, hsaco) prints a summary, its bytes go to
`-o FILE` (one kernel) or `--dump-dir DIR`.

`--dump-dir DIR` writes the input's whole compilation for `--target`, whatever `--emit` and `-p`
say: DIR/module.{linalg,fused,scheduled}.mlir and every stage of every kernel as
DIR/<kernel>/<kernel>.<stage> (+ <kernel>.json, the stages' metadata).

Errors are diagnostics `file:line:col: error: ...` on stderr with exit code 1.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
from typing import Optional, TextIO

from uniorch import config
from uniorch.errors import LoweringError, PipelineError, UniorchError
from uniorch.ir.diagnostics import Diagnostic, from_error, rebase

from .model_source import ModelSource, SourceError, user_exception

from .kernel_stages import MODULE_STAGES

MLIR_STAGES = ("torch", "linalg")  # torch-mlir's; then uniorch's kernel stages
KERNEL_TEXT_STAGES = ("triton", "ttir")  # every target has these: kernel_listing prints them
SPLIT_MARKER = "// -----"


class CliError(Exception):
    def __init__(self, diags):
        self.diags = diags if isinstance(diags, list) else [diags]


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would exit 2 with usage; mlir-opt style is one line, exit 1
        raise CliError(Diagnostic(f"{message} (see `uniorch-opt --help`)"))


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="uniorch-opt", description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", nargs="?", help=".mlir file, '-' for stdin, model.py:factory, or an AOT bundle "
                                            "directory (each region's launch plan, with the bundle's inputs and symbols)")
    p.add_argument("-p", "--pass-pipeline", default=None,
                   help="pipeline text; upstream MLIR and uniorch passes by name, e.g. "
                        "'uniorch-torch-to-linalg,func.func(canonicalize,cse)'")
    p.add_argument("--emit", default=None, metavar="STAGE",
                   help=f"bring the input to this stage: {', '.join(MODULE_STAGES)} (the module), or per kernel "
                        "triton, ttir and the target's own stages (cuda: ttgir, llir, ptx, cubin; rocm: ttgir, "
                        "llir, amdgcn, hsaco; see --list-targets)")
    p.add_argument("--target", default="interpret",
                   help="target the kernels are scheduled and compiled for (vendor[:arch], e.g. cuda:sm_90, "
                        "rocm:gfx942); GPU targets cross-compile without a GPU")
    p.add_argument("-o", dest="output", default="-",
                   help="output file (default stdout); a binary stage (cubin, hsaco) of one kernel is written raw")
    p.add_argument("--dump-dir", default=None, metavar="DIR",
                   help="write every stage of the compilation for --target: DIR/module.<stage>.mlir and "
                        "DIR/<kernel>/<kernel>.<stage>")
    p.add_argument("--split-input-file", action="store_true",
                   help=f"process each '{SPLIT_MARKER}'-separated chunk of a .mlir input on its own")
    p.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every pass (stderr)")
    p.add_argument("--print-ir-before", action="append", default=[], metavar="PASS",
                   help="print the IR before PASS (repeatable; comma-separated names allowed)")
    p.add_argument("--print-ir-after", action="append", default=[], metavar="PASS",
                   help="print the IR after PASS (repeatable; comma-separated names allowed)")
    p.add_argument("--timing", "--mlir-timing", dest="timing", action="store_true",
                   help="report wall time per stage and pass (stderr)")
    p.add_argument("--mlir-print-debuginfo", "--debuginfo", dest="debuginfo", action="store_true",
                   help="print locations: module path and the model's file:line for every op")
    p.add_argument("--dynamic", action="store_true",
                   help="model.py:factory only: capture every size of the example tensors that is not 0 or 1 as "
                        "a symbolic size (printed '?' in the IR), as uniorch.compile(model, dynamic=True) does")
    p.add_argument("--list-passes", action="store_true", help="list uniorch and upstream passes, then exit")
    p.add_argument("--list-targets", action="store_true",
                   help="list targets with their architectures and stages, and whether they run here, then exit")
    return p


def main(argv: Optional[list[str]] = None, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    try:
        try:
            # --help: argparse prints to sys.stdout and exits; main() writes to its own stdout
            # and returns, so in-process callers get the text and a status, not SystemExit.
            with contextlib.redirect_stdout(stdout):
                args = build_parser().parse_args(argv)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 0
        return _run(args, stdout, stderr)
    except CliError as err:
        _report(err.diags, stderr)
        return 1
    except KeyboardInterrupt:
        print("uniorch-opt: interrupted", file=stderr)
        return 130
    except BrokenPipeError:  # `uniorch-opt ... | head`: the reader is gone, which is no bug of ours
        if stdout is sys.stdout:
            # Python would flush stdout again at exit and complain a second time
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:  # a bug of ours: say so plainly, traceback only on request
        if config.flag("UNIORCH_TRACEBACK"):
            raise
        print(f"uniorch-opt: internal error: {type(exc).__name__}: {exc}\n"
              f"note: this is a uniorch bug; rerun with UNIORCH_TRACEBACK=1 for the traceback", file=stderr)
        return 1


_ILLEGAL = re.compile(r"failed to legalize operation '(torch\.[\w.]+)'")
_OPERATOR = re.compile(r'"torch\.operator"\([^)]*\) <\{name = "torch\.([\w.]+)"')


def _report(diags: list[Diagnostic], stderr: TextIO) -> None:
    for d in diags:
        _explain_unlowered(d)
        print(d.render() if d.file or d.severity != "error" else f"uniorch-opt: {d.render()}", file=stderr)


def _explain_unlowered(d: Diagnostic) -> None:
    """Names the ATen op behind MLIR's "failed to legalize operation 'torch.operator'": torch-mlir
    imports an op it has no definition of as that generic op, whose name alone says nothing."""
    m = _ILLEGAL.search(d.message) if d.severity == "error" else None
    if m is None:
        return
    op = _OPERATOR.search(d.message)
    name = op.group(1) if m.group(1) == "torch.operator" and op else m.group(1).removeprefix("torch.")
    if name == "operator":
        return
    d.notes.insert(0, Diagnostic(f"{name} has no lowering to linalg; uniorch.compile runs it in PyTorch",
                                 severity="note", file=d.file, line=d.line, col=d.col))


def _run(args, stdout: TextIO, stderr: TextIO) -> int:
    if args.list_passes:
        print(list_passes(), file=stdout)
        return 0
    if args.list_targets:
        from .kernel_stages import list_targets

        print(list_targets(), file=stdout)
        return 0
    if not args.input:
        raise CliError(Diagnostic("no input given: pass a .mlir file, '-' or model.py:factory (see --help)"))

    from uniorch.ir.context import make_context
    from uniorch.passes import Instrumentation, Timing, parse_pipeline
    from uniorch.targets import TargetError, parse_target

    from . import kernel_stages

    try:
        target = parse_target(args.target)
    except TargetError as err:
        raise CliError(Diagnostic(f"--target: {err}")) from None
    if args.emit is not None:
        try:
            kernel_stages.check_emit(args.emit, target)
        except UniorchError as err:
            raise CliError(Diagnostic(str(err))) from None
    ctx = make_context()
    timing = Timing() if args.timing else None
    inst = Instrumentation(
        print_after_all=args.print_ir_after_all,
        print_before=_names(args.print_ir_before),
        print_after=_names(args.print_ir_after),
        debuginfo=args.debuginfo,
        timing=timing,
        out=stderr,
    )
    try:
        elements = parse_pipeline(args.pass_pipeline, ctx) if args.pass_pipeline else []
    except PipelineError as err:
        raise CliError(Diagnostic(f"--pass-pipeline: {err}")) from None
    elements = [_check_target_option(e) for e in elements]

    per_kernel = args.emit is not None and args.emit not in MODULE_STAGES
    stage = None
    if args.emit in ("fused", "scheduled") or per_kernel:
        stage = "fused" if args.emit == "fused" else "scheduled"
    _check_print_ir(inst, elements, stage, target, ctx)
    if args.dump_dir:
        _make_dir(args.dump_dir)  # before any compile work: a bad DIR is the user's, and found at once
    outputs, blobs, diags = [], [], []
    chunks = _chunks(args, ctx, timing)
    for i, chunk in enumerate(chunks):
        try:
            module = chunk.build()
            if args.dump_dir:
                where = args.dump_dir if len(chunks) == 1 else os.path.join(args.dump_dir, f"split-{i}")
                _dump(module, where, target, chunk, ctx, timing)
            if stage is not None:
                _to_stage(module, stage, target, chunk, timing, inst)
            _run_pipeline(module, elements, inst, target, chunk)
            if args.emit in KERNEL_TEXT_STAGES:
                outputs.append(_kernel_text(module, args.emit, target, chunk, timing))
            elif per_kernel:
                kernels = _backend_stage(module, args.emit, target, timing)
                outputs.append(kernel_stages.listing(kernels, args.emit))
                blobs.extend(kernel_stages.binaries(kernels, args.emit))
            else:
                outputs.append(module.operation.get_asm(enable_debug_info=args.debuginfo))
        except CliError as err:
            diags.extend(err.diags)
            outputs.append("")  # the failing chunk's place, as mlir-opt keeps it between the markers
    _report(diags, stderr)
    if timing is not None:
        print(timing.report(), file=stderr)
    if diags:
        # mlir-opt prints the chunks that went through beside the failing ones' diagnostics; a file
        # (-o) is still written only when everything succeeded
        if len(chunks) > 1 and args.output == "-" and any(outputs):
            _write("-", ("\n" + SPLIT_MARKER + "\n").join(outputs), stdout)
        return 1
    if blobs and args.output != "-":
        _write_binary(args.output, args.emit, blobs)
        return 0
    _write(args.output, ("\n" + SPLIT_MARKER + "\n").join(outputs), stdout)
    return 0


def _backend_stage(module, stage, target, timing):
    from . import kernel_stages

    with _timed(timing, f"{stage} ({target})"):
        try:
            return kernel_stages.compile_kernels(module, target, stage)
        except UniorchError as err:
            raise CliError(Diagnostic(str(err))) from None


def _make_dir(folder: str) -> None:
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise CliError(Diagnostic(f"could not create dump directory '{folder}': {err.strerror}")) from None


def _dump(module, folder, target, chunk, ctx, timing) -> None:
    """The chunk's compilation for `target`, every stage, into `folder` (from a copy of the module)."""
    from uniorch.ir.context import parse_module
    from uniorch.ir.stages import lower

    from . import kernel_stages

    def copy():
        return parse_module(module.operation.get_asm(enable_debug_info=True), ctx)

    with _timed(timing, "dump"):
        linalg = copy()
        if _is_scheduled(linalg):  # fusing its launch plan again would invent kernels of func.calls
            texts = {"scheduled": str(linalg)}
        else:
            try:
                lower(linalg, "linalg")
            except LoweringError as err:
                raise CliError(rebase(err.diagnostics or [Diagnostic(str(err))], chunk.name)) from None
            texts = {"linalg": str(linalg)}
            fused = parse_module(str(linalg), ctx)
            _kernel_stage(fused, "fused", target, chunk, None)
            texts["fused"] = str(fused)
            _kernel_stage(linalg, "scheduled", target, chunk, None)
            texts["scheduled"] = str(linalg)
        _make_dir(folder)
        try:
            kernel_stages.dump(folder, texts, linalg, target)
        except UniorchError as err:
            raise CliError(Diagnostic(str(err))) from None
        except OSError as err:
            raise CliError(Diagnostic(f"could not write '{err.filename}' in dump directory '{folder}': "
                                      f"{err.strerror}")) from None


def _is_scheduled(module) -> bool:
    """Whether the module's kernels are outlined already (uniorch-opt's, or a bundle's, scheduled MLIR)."""
    return any(op.operation.name == "func.func" and "uniorch.kernel" in op.operation.attributes
               for op in module.body.operations)


def _to_stage(module, stage, target, chunk, timing, inst) -> None:
    """Brings a linalg module to `fused` or `scheduled`; a scheduled one keeps the kernels it has."""
    if not _is_scheduled(module):
        _kernel_stage(module, stage, target, chunk, timing, inst)
    elif stage == "fused":
        raise CliError(Diagnostic("--emit fused: the input is already at stage 'scheduled' (its kernels are "
                                  "outlined), past 'fused'", file=chunk.name, line=chunk.line_offset + 1, col=1))


def _write_binary(path: str, stage: str, blobs: list[tuple[str, bytes]]) -> None:
    if len(blobs) != 1:
        names = ", ".join(name for name, _ in blobs)
        raise CliError(Diagnostic(f"--emit {stage} -o {path}: {len(blobs)} kernels ({names}) but a binary file holds "
                                  f"one; use --dump-dir DIR for one file per kernel"))
    try:
        with open(path, "wb") as f:
            f.write(blobs[0][1])
    except OSError as err:
        raise CliError(Diagnostic(f"could not write output file '{path}': {err.strerror}")) from None


def _kernel_stage(module, stage, target, chunk, timing, inst=None) -> None:
    from uniorch.runtime.compiler import to_kernel_stage

    with _timed(timing, stage):
        try:
            to_kernel_stage(module, stage, target, instrumentation=inst)
        except LoweringError as err:
            raise CliError(rebase(err.diagnostics or [Diagnostic(str(err))], chunk.name)) from None
        except UniorchError as err:
            raise CliError(Diagnostic(str(err))) from None


def _kernel_text(module, stage, target, chunk, timing) -> str:
    from uniorch.runtime.compiler import kernel_listing

    with _timed(timing, stage):
        try:
            return kernel_listing(module, stage, target)
        except UniorchError as err:
            raise CliError(Diagnostic(str(err))) from None


def _names(values: list[str]) -> set[str]:
    return {n.strip() for v in values for n in v.split(",") if n.strip()}


def _check_print_ir(inst, elements, stage, target, ctx) -> None:
    """--print-ir-before/after must name a pass that runs: a typo would otherwise print nothing."""
    from uniorch.passes import parse_pipeline

    if not (inst.print_before or inst.print_after):
        return  # nor import the stage pipelines (torch) before a missing input is reported
    steps = list(elements)
    if stage is not None:
        from uniorch.runtime.compiler import PIPELINES

        steps = parse_pipeline(PIPELINES[stage].format(target=target), ctx) + steps
    runs = set().union(*(e.names for e in steps))
    labels = ", ".join(dict.fromkeys(e.label for e in steps)) or "none (give one with -p, or --emit fused or later)"
    for flag, names in (("--print-ir-before", inst.print_before), ("--print-ir-after", inst.print_after)):
        missing = sorted(names - runs)
        if missing:
            raise CliError(Diagnostic(f"{flag}={missing[0]}: no pass '{missing[0]}' in the pipeline; "
                                      f"its passes: {labels}"))


def _check_target_option(element):
    """A uniorch pass's `target=` option parses as --target does (the pass would take any string)."""
    import dataclasses

    from uniorch.passes.pipeline import Element
    from uniorch.targets import TargetError, parse_target

    pass_ = element.uniorch
    if pass_ is None or not getattr(pass_, "target", ""):
        return element
    try:
        target = parse_target(pass_.target)
    except TargetError as err:
        raise CliError(Diagnostic(f"--pass-pipeline: pass '{pass_.name}' option 'target': {err}")) from None
    return Element(element.text, dataclasses.replace(pass_, target=str(target)))


def _pass_context(elements, inst, target):
    """What `-p`'s passes see: --target (a pass's own `target=` wins), and for uniorch-schedule the
    float32 dot precision `--emit scheduled` would stamp, so both print the same schedules."""
    from uniorch.passes import PassContext

    pctx = PassContext(out=inst.out, target=str(target))
    scheds = [e.uniorch for e in elements if e.uniorch is not None and e.uniorch.name == "uniorch-schedule"]
    if scheds:
        from uniorch.runtime.compiler import fp32_precisions
        from uniorch.targets import parse_target

        pctx.fp32_dots = fp32_precisions(parse_target(scheds[0].target or target))
    return pctx


def _run_pipeline(module, elements, inst, target, chunk) -> None:
    from uniorch.passes import run_pipeline

    try:
        run_pipeline(module, elements, _pass_context(elements, inst, target), inst)
    except LoweringError as err:
        raise CliError(rebase(err.diagnostics or [Diagnostic(str(err))], chunk.name)) from None
    except UniorchError as err:
        raise CliError(Diagnostic(str(err))) from None


class _Chunk:
    """One unit of work: a text chunk of a .mlir input, or a Python model to capture."""

    def __init__(self, name: str, build, line_offset: int = 0):
        self.name, self._build, self.line_offset = name, build, line_offset

    def build(self):
        return self._build(self)


def _chunks(args, ctx, timing) -> list[_Chunk]:
    src = ModelSource.parse(args.input)
    if src is None and args.dynamic:
        raise CliError(Diagnostic("--dynamic applies to a model.py:factory input (an .mlir file says its own '?' sizes)"))
    if src is not None:
        if args.split_input_file:
            raise CliError(Diagnostic("--split-input-file applies to .mlir inputs, not Python models"))
        return [_Chunk(src.path, lambda c: _from_python(src, args.emit or "linalg", ctx, timing, args.dynamic))]
    if os.path.isdir(args.input):
        if args.split_input_file:
            raise CliError(Diagnostic("--split-input-file applies to .mlir inputs, not bundles (one chunk per region)"))
        return _bundle_chunks(args.input, args.emit, ctx, timing)
    if args.input.endswith(".onnx"):
        if args.split_input_file:
            raise CliError(Diagnostic("--split-input-file applies to .mlir inputs, not ONNX models"))
        return [_Chunk(args.input, lambda c: _from_onnx(args.input, args.emit or "linalg", ctx, timing))]
    name = "<stdin>" if args.input == "-" else args.input
    text = _read(args.input)
    if not args.split_input_file:
        return [_Chunk(name, lambda c: _from_text(text, c, args.emit, ctx, timing))]
    chunks, offset = [], 0
    for part in _split(text):
        chunks.append(_Chunk(name, lambda c, part=part: _from_text(part, c, args.emit, ctx, timing), offset))
        # the chunk's own lines plus the `// -----` line after it, so diagnostics in later chunks
        # carry the line numbers of the original file (as mlir-opt's do)
        offset += part.count("\n") + 2
    return chunks


def _bundle_chunks(path: str, emit: Optional[str], ctx, timing) -> list[_Chunk]:
    """An AOT bundle's regions, each its scheduled MLIR with what the manifest says about the
    inputs as module attributes: `uniorch.inputs` (dtype and dims, a symbol where the dim is
    symbolic) and `uniorch.symbols` (where each symbol is read, its range)."""
    from uniorch.runtime.bundle import BundleError, read_manifest

    try:
        manifest = read_manifest(path, check_versions=False)
    except BundleError as err:
        raise CliError(Diagnostic(str(err))) from None
    chunks = []
    for reg in manifest["regions"]:
        name = os.path.join(path, reg["mlir"])
        text = _read(name)

        def build(c, text=text):
            module = _from_text(text, c, emit, ctx, timing)
            _annotate_bundle(module, manifest)
            return module

        chunks.append(_Chunk(name, build))
    if not chunks:
        raise CliError(Diagnostic(f"{path}: the bundle has no compiled regions (every op runs eagerly)"))
    return chunks


def _annotate_bundle(module, manifest: dict) -> None:
    from torch_mlir import ir

    with module.context:
        inputs = [f"{s['kind']} {s['target']}: {s['dtype']}[{', '.join(str(d) for d in s['shape'])}]"
                  for s in manifest["inputs"]]
        attrs = module.operation.attributes
        attrs["uniorch.target"] = ir.StringAttr.get(manifest["target"])
        attrs["uniorch.inputs"] = ir.ArrayAttr.get([ir.StringAttr.get(t) for t in inputs])
        symbols = {}
        for sym, info in manifest.get("symbols", {}).items():
            lo, hi = info["range"]
            symbols[sym] = ir.StringAttr.get(f"input {info['input']} dim {info['dim']}, "
                                             f"{lo}..{'inf' if hi is None else hi}")
        if symbols:
            attrs["uniorch.symbols"] = ir.DictAttr.get(symbols)


def _split(text: str) -> list[str]:
    parts, cur = [], []
    for line in text.split("\n"):
        if line.startswith(SPLIT_MARKER) and line[len(SPLIT_MARKER):].strip() == "":
            parts.append("\n".join(cur))
            cur = []
        else:
            cur.append(line)
    parts.append("\n".join(cur))
    return parts


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as err:
        raise CliError(Diagnostic(f"could not open input file '{path}': {err.strerror}")) from None
    except UnicodeDecodeError:
        raise CliError(Diagnostic(f"'{path}' is not UTF-8 text; expected MLIR assembly")) from None


def _timed(timing, name):
    class _T:
        def __enter__(self):
            self.t = time.perf_counter()

        def __exit__(self, *exc):
            if timing is not None:
                timing.record(name, time.perf_counter() - self.t)

    return _T()


def _from_text(text: str, chunk: _Chunk, emit: Optional[str], ctx, timing):
    emit = emit if emit in MLIR_STAGES or emit is None else "linalg"
    from torch_mlir import ir

    from uniorch.ir.context import parse_module
    from uniorch.ir.stages import STAGES, lower, stage_of

    with _timed(timing, "parse"):
        try:
            # A later chunk of a split file is parsed after as many empty lines as precede it, so
            # its diagnostics and locations carry the line numbers of the original file.
            module = parse_module("\n" * chunk.line_offset + text, ctx)
        except ir.MLIRError as err:
            raise CliError(rebase(from_error(err), chunk.name)) from None
        _name_locations(module, chunk.name)
    if emit is not None:
        have = stage_of(module)
        if STAGES.index(have) > STAGES.index(emit):
            raise CliError(Diagnostic(f"--emit {emit}: the input is already at stage '{have}', past '{emit}'",
                                      file=chunk.name, line=chunk.line_offset + 1, col=1))
        with _timed(timing, f"lower to {emit}"):
            try:
                lower(module, emit)
            except LoweringError as err:
                raise CliError(rebase(err.diagnostics, chunk.name)) from None
    return module


_ANON_LOC = re.compile(r'^loc\("-":(\d+):(\d+)\)$')


def _name_locations(module, name: str) -> None:
    """Names MLIR's anonymous text buffer ("-") after the input in the module's locations.

    mlir-opt's `--mlir-print-debuginfo` shows `loc("x.mlir":3:8)`; a module parsed from a string
    says `loc("-":3:8)`, and every diagnostic a later pass reports at such an op would too.
    """
    from torch_mlir import ir

    renamed: dict[str, Optional[ir.Location]] = {}

    def new_location(loc):
        text = str(loc)
        if text not in renamed:
            m = _ANON_LOC.match(text)
            renamed[text] = (ir.Location.file(name, int(m.group(1)), int(m.group(2)), context=module.context)
                             if m else None)
        return renamed[text]

    def visit(op):
        loc = new_location(op.location)
        if loc is not None:
            op.location = loc
        for region in op.regions:
            for block in region.blocks:
                for arg in block.arguments:
                    loc = new_location(arg.location)
                    if loc is not None:
                        arg.set_location(loc)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)


def _from_onnx(path: str, emit: str, ctx, timing):
    """An ONNX model through torch-mlir's ONNX importer: `torch` stops after onnx-to-torch."""
    from uniorch.frontends.onnx import ONNX_TO_TORCH, OnnxError, import_onnx, input_specs, load, to_linalg
    from uniorch.ir.stages import run_pipeline_text

    kernels = emit not in MLIR_STAGES
    emit = emit if emit in MLIR_STAGES else "linalg"
    try:
        with _timed(timing, "load ONNX"):
            proto = load(path)
        symbolic = [f"{s.name}{list(s.shape)}" for s in input_specs(proto)
                    if not all(isinstance(d, int) and d > 0 for d in s.shape)]
        if kernels and symbolic:
            raise OnnxError(f"{path}: kernel stages need static shapes, but these inputs have symbolic "
                            f"dimensions: {', '.join(symbolic)}; uniorch.compile(model) fixes them per call")
        with _timed(timing, f"import and lower to {emit}"):
            if emit == "linalg":
                return to_linalg(proto, ctx)
            module = import_onnx(proto, ctx)
            run_pipeline_text(module, ONNX_TO_TORCH, "converting ONNX to the torch dialect")
            return module
    except OnnxError as err:
        raise CliError(err.diagnostics or [Diagnostic(str(err), file=path, line=1, col=1)]) from None
    except LoweringError as err:
        raise CliError(err.diagnostics or [Diagnostic(str(err))]) from None


def _from_python(src: ModelSource, emit: str, ctx, timing, dynamic: bool = False):
    emit = emit if emit in MLIR_STAGES else "linalg"
    from uniorch.errors import CaptureError

    try:
        with _timed(timing, "load model"):
            model, margs, mkwargs = src.load()
        # imported after the load, so a missing file or factory is reported without first
        # spending seconds importing torch
        from uniorch.capture import capture
        from uniorch.ir import import_captured, lower
        from uniorch.runtime.guards import every_dim

        with _timed(timing, "capture"):
            captured = capture(model, margs, mkwargs, dynamic=every_dim(margs, mkwargs) if dynamic else None)
    except SourceError as err:
        raise CliError(err.diags) from None
    except CaptureError as err:
        cause = err.__cause__ or err
        raise CliError([user_exception(cause, src.path, f"capturing the model from '{src.path}:{src.factory}' failed")]) from None
    try:
        with _timed(timing, "import"):
            module = import_captured(captured, ctx)
        with _timed(timing, f"lower to {emit}"):
            lower(module, emit)
    except LoweringError as err:
        raise CliError(err.diagnostics or [Diagnostic(str(err))]) from None
    except UniorchError as err:
        raise CliError(Diagnostic(str(err), file=src.path, line=1, col=1)) from None
    return module


def _write(path: str, text: str, stdout: TextIO) -> None:
    if path == "-":
        stdout.write(text if text.endswith("\n") else text + "\n")
        return
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")
    except OSError as err:
        raise CliError(Diagnostic(f"could not write output file '{path}': {err.strerror}")) from None


def list_passes() -> str:
    from uniorch.passes import registry
    from uniorch.passes.pipeline import upstream_passes

    lines = ["uniorch passes (options in {key=value}):"]
    for name in registry.names():
        cls = registry.get(name)
        opts = ", ".join(f"{k}={f.default!r}" for k, f in cls.options().items())
        lines.append(f"  {name:<34} {cls.summary}" + (f"  [{opts}]" if opts else ""))
    upstream = upstream_passes()
    lines.append("")
    lines.append("upstream MLIR / torch-mlir passes and pipelines (any pass registered in MLIR's Python bindings"
                 " also works, e.g. linalg-fuse-elementwise-ops):")
    for name, summary in upstream:
        lines.append(f"  {name:<34} {summary.strip()}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
