"""Ascend's `triton-adapter-opt`: TTIR → linalg, the stage triton-ascend calls "ttadapter".

The executable comes out of the triton-ascend wheel (scripts/setup.sh puts it in the venv's bin/,
checksummed; installing the package itself would replace `triton`). Both the `cann` backend (its
hand-off to bishengir-compile) and the `cpu` backend (which lowers the linalg further with
upstream MLIR and runs it) call it, one kernel at a time, as a subprocess under a timeout.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from typing import Optional

from .sdk import BackendError

TOOL = "triton-adapter-opt"
TIMEOUT_S = 120
# Where setup.sh leaves it: the running venv's bin/ (found even when the venv is not activated).
_HINT = "run scripts/setup.sh (it extracts the tool from the triton-ascend 3.2.0 wheel into the venv)"


def path() -> Optional[str]:
    chosen = os.environ.get("UNIORCH_TRITON_ADAPTER", "")  # declared in uniorch.config.KNOBS
    if chosen:
        return chosen if os.access(chosen, os.X_OK) else None
    for folder in (os.path.join(sys.prefix, "bin"), os.path.dirname(sys.executable)):
        candidate = os.path.join(folder, TOOL)
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which(TOOL)


def missing_reason() -> str:
    """"" when the adapter is here, else what is missing and how to get it."""
    if path():
        return ""
    chosen = os.environ.get("UNIORCH_TRITON_ADAPTER", "")
    if chosen:
        return f"{TOOL} not found: UNIORCH_TRITON_ADAPTER={chosen} is not an executable file"
    return f"{TOOL} not found (not in {os.path.join(sys.prefix, 'bin')} nor on PATH): {_HINT}"


def linalg_flags(options, named_ops: bool) -> list[str]:
    """The passes triton-ascend's `ttir_to_linalg` runs (third_party/ascend/backend/compiler.py,
    3.2.0), with its defaults for the Atlas A2/A3 path. `named_ops=False` gives linalg.generic
    for elementwise ops, which upstream MLIR lowers without Ascend's own named ops."""
    on_95 = str(bool(getattr(options, "compile_on_910_95", False)))
    simt = str(bool(getattr(options, "force_simt_template", False)))
    nd2nz = bool(getattr(options, "enable_nd2nz_on_vector", False))
    select = bool(getattr(options, "enable_select_analysis", True))
    return [
        f"--discrete-mask-access-conversion=compile-on-910-95={on_95} force-simt-template={simt}",
        "--triton-to-annotation",
        f"--triton-to-unstructure=compile-on-910-95={on_95} force-simt-template={simt}",
        "--triton-to-hivm",
        "--triton-to-hfusion",
        "--triton-to-llvm",
        "--bubble-up-operation",
        f"--triton-to-linalg=global-kernel=false named-ops={named_ops} enable-nd2nz-on-vector={nd2nz} "
        f"enable-select-analysis={select} compile-on-910-95={on_95}",
    ]


def run(ttir: str, kernel: str, options, named_ops: bool = True, generic: bool = False) -> str:
    """The adapter's linalg for one kernel's TTIR text. `generic`: print ops in MLIR's generic
    form (the adapter's MLIR is older than torch-mlir's, and some of its custom syntax, e.g.
    `bufferization.to_tensor`'s, does not parse there; the generic form does)."""
    exe = path()
    if exe is None:
        raise BackendError(f"kernel {kernel}: {missing_reason()}")
    with tempfile.TemporaryDirectory(prefix="uniorch-ttadapter-") as tmp:
        src, dst = os.path.join(tmp, "kernel.ttir.mlir"), os.path.join(tmp, "kernel.ttadapter.mlir")
        with open(src, "w") as f:
            f.write(ttir)
        argv = [exe, src, *linalg_flags(options, named_ops)]
        if generic:
            argv.append("--mlir-print-op-generic")
        argv += ["-o", dst]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise BackendError(f"{TOOL} rejected kernel {kernel}: no answer within {TIMEOUT_S} s") from None
        if done.returncode != 0 or not os.path.exists(dst):
            raise BackendError(f"{TOOL} rejected kernel {kernel} (exit {done.returncode}): {_errors(done.stderr)}")
        with open(dst) as f:
            return f.read()


def _errors(stderr: str) -> str:
    """The adapter's diagnostics: without its location-less-op warnings (one per linalg.yield),
    and, when it crashed, up to LLVM's stack dump (its first lines are the message)."""
    lines = []
    for ln in stderr.splitlines():
        if ln.startswith(("PLEASE submit a bug report", "Stack dump:")):
            break
        if ln.strip() and "have no location" not in ln and "see current operation" not in ln:
            lines.append(ln)
    return "\n".join(lines[:40]) or stderr.strip()[:2000] or "(no message)"


__all__ = ["TOOL", "linalg_flags", "missing_reason", "path", "run"]
