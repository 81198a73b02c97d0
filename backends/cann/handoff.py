"""The Ascend hand-off: per kernel, the files and exact command lines an Ascend toolchain takes in.

Huawei's own Triton backend, triton-ascend, builds a kernel in two tools:

  1. `triton-adapter-opt`: TTIR → linalg ("ttadapter" in triton-ascend's stage names)
  2. `bishengir-compile`:  linalg → NPU kernel object (AscendNPU IR / BiSheng IR)

The first is public and runs here (`backends/triton_adapter.py`, the backend's "ttadapter"
stage): its output is kept with every kernel. The second ships only with the CANN toolkit, so
uniorch writes down its exact command line, and an engineer with CANN installed runs `build.sh`.

The flags are the ones triton-ascend passes (third_party/ascend/backend/compiler.py of
the triton-ascend repository: `ttir_to_linalg` lists the triton-adapter-opt command line,
`linalg_to_bin_enable_npu_compile_A2_A3` builds the bishengir-compile one; its lit tests under
third_party/ascend/test use the same `--triton-to-linalg=global-kernel=false named-ops=True ...`
spelling). They change between triton-ascend releases; `FLAGS_FROM` names the version followed.

Besides TTIR, the bundle carries the kernel's linalg form as uniorch built it (the outlined
`func.func @kN_...` of the scheduled module, linalg-on-tensors) when the caller has it: it is the
graph-level view of the same kernel, for an engineer who wants to start from linalg instead.
"""
from __future__ import annotations

import json
import os
import re
import shlex
from typing import Iterable, Optional

FORMAT = "uniorch-cann-handoff/1"
FLAGS_FROM = "triton-ascend 3.2 (Atlas A2/A3 path)"
# Where the driver is expected to leave the kernel's linalg text for the stages (see report /
# docs/backend_guide.md): metadata[LINALG_KEY], set by the driver from compile_kernel(linalg=...);
# `write_bundle(linalg=...)` also takes it.
LINALG_KEY = "uniorch_linalg"

# bishengir-compile's --target takes a SoC name; a bare family name means its first SKU.
_SOC = {"ascend910b": "Ascend910B1", "ascend910b1": "Ascend910B1", "ascend910b2": "Ascend910B2",
        "ascend910b3": "Ascend910B3", "ascend910b4": "Ascend910B4"}


def soc_name(arch: str, override: str = "") -> str:
    return override or _SOC.get(arch, arch)


def entry_name(ttir: str) -> str:
    """The kernel's `tt.func public @name` (triton-ascend reads it the same way, by regex)."""
    m = re.search(r"tt\.func\s+public\s+@([\w$.]+)", ttir)
    if not m:
        raise ValueError("no `tt.func public` entry in the TTIR")
    return m.group(1)


def adapter_argv(stem: str, options) -> list[str]:
    """triton-adapter-opt: TTIR → linalg, as triton-ascend's ttir_to_linalg spells it."""
    from ..triton_adapter import linalg_flags

    return ["triton-adapter-opt", f"{stem}.ttir.mlir", *linalg_flags(options, named_ops=True),
            "-o", f"{stem}.ttadapter.mlir"]


def bishengir_argv(stem: str, soc: str, options) -> list[str]:
    """bishengir-compile: linalg → kernel object, as triton-ascend's A2/A3 path spells it.

    Older bishengir builds take `--enable-hivm-compile=true`, register-based ones `--reg-based=true`
    instead (triton-ascend probes `--help`); the former is written here."""
    return [
        "bishengir-compile", f"{stem}.ttadapter.mlir",
        f"--target={soc}",
        f"--enable-auto-multi-buffer={bool(options.multibuffer)}",
        f"--enable-auto-bind-sub-block={bool(options.enable_auto_bind_sub_block)}",
        "--enable-hfusion-compile=true",
        "--enable-hivm-compile=true",
        "--enable-triton-kernel-compile=true",
        "-o", stem,
    ]


ENTRY_KEY = "uniorch_entry"  # the kernel's entry, recorded by the ttadapter stage from the TTIR


def mix_mode(ttadapter: str) -> Optional[str]:
    """Which cores the adapter put the kernel on ("aiv" vector, "aic" cube, "mix"), as
    triton-ascend's _parse_linalg_metadata reads it before bishengir-compile."""
    m = re.search(r'mix_mode\s*=\s*"(\w+)"', ttadapter)
    return m.group(1) if m else None


def manifest(ttadapter: str, metadata: dict, arch: str, options, stem: Optional[str] = None) -> dict:
    """The hand-off of one kernel, from the adapter's linalg and the driver's metadata (what a
    stage sees). triton-adapter-opt already ran (its command is listed under `done`); only
    bishengir-compile remains for the Ascend machine."""
    entry = metadata.get(ENTRY_KEY) or _func_name(ttadapter)
    stem = stem or entry
    soc = soc_name(arch, options.soc)
    linalg = metadata.get(LINALG_KEY) or ""
    done, commands = [adapter_argv(stem, options)], [bishengir_argv(stem, soc, options)]
    return {
        "format": FORMAT,
        "entry": entry,
        "target": f"cann:{arch}",
        "soc": soc,
        "flags_from": FLAGS_FROM,
        "inputs": {"ttir": f"{stem}.ttir.mlir", "ttadapter": f"{stem}.ttadapter.mlir",
                   "linalg": f"{stem}.linalg.mlir" if linalg else None},
        "outputs": {"binary": f"{stem}.o (older bishengir-compile: {stem}_reloc.o)"},
        "mix_mode": mix_mode(ttadapter),
        "done": [{"tool": argv[0], "argv": argv, "shell": shlex.join(argv), "by": "uniorch (ttadapter stage)"}
                 for argv in done],
        "remaining": [argv[0] for argv in commands],
        "commands": [{"tool": argv[0], "argv": argv, "shell": shlex.join(argv)} for argv in commands],
        "notes": [
            # triton-ascend's _parse_linalg_metadata does this between the two tools
            "before bishengir-compile, triton-ascend reads `mix_mode` from the ttadapter output (the kernel "
            "runs on the vector cores for 'aiv', cube cores for 'aic') and removes that attribute",
            "launch: grid, argument order and constexprs are in `launch`; the NPU runtime launches the entry "
            "by name (names over 49 characters are cut to their last 49 by triton-ascend's launcher)",
        ],
        "triton_version": metadata.get("triton_version"),
    }


def _func_name(text: str) -> str:
    m = re.search(r"func\.func\s+(?:public\s+)?@([\w$.]+)", text) or re.search(r'sym_name = "([\w$.]+)"', text)
    if not m:
        raise ValueError("no function in the adapter's output")
    return m.group(1)


def launch_contract(ks) -> dict:
    """How to call the kernel (docs/kernels.md §4): pointer + strides per tensor, then constexprs."""
    return {"grid": list(ks.grid), "arguments": ks.arg_names(), "signature": ks.signature(),
            "constexprs": dict(ks.constexprs), "input_ranks": list(ks.input_ranks),
            "output_ranks": list(ks.output_ranks)}


def kernel_files(ck, linalg: str = "") -> dict[str, str]:
    """One compiled kernel's hand-off files, by name: `<fn>.ttir.mlir`, `<fn>.ttadapter.mlir` (the
    adapter's output, bishengir-compile's input), `<fn>.linalg.mlir` (when
    its linalg text is known: `linalg`, else the driver's metadata), `<fn>.triton.py`, and
    `<fn>.manifest.json` (the "handoff" stage's manifest plus the launch contract)."""
    if "handoff" not in ck.asm:
        raise ValueError(f"kernel {ck.name} was compiled without its 'handoff' stage")
    info = json.loads(ck.asm["handoff"])
    stem = ck.source.fn_name
    files = {f"{stem}.ttir.mlir": ck.asm["ttir"], f"{stem}.ttadapter.mlir": ck.asm["ttadapter"],
             f"{stem}.triton.py": ck.asm.get("triton", ck.source.source)}
    text = linalg or ck.metadata.get(LINALG_KEY) or ""
    if text:
        info["inputs"]["linalg"] = f"{stem}.linalg.mlir"
        files[f"{stem}.linalg.mlir"] = text
    info["launch"] = launch_contract(ck.source)
    files[f"{stem}.manifest.json"] = json.dumps(info, indent=1) + "\n"
    return files


def build_script(kernels: Iterable, folders: Optional[dict] = None) -> str:
    """`build.sh`: every kernel's commands in order, run where the script lies; `folders` maps a
    kernel's name to the folder beside the script holding its files (an AOT bundle's
    `handoff/<kernel>/`), else they lie beside it."""
    lines = ["#!/usr/bin/env bash",
             "# Builds every kernel of this bundle with the CANN toolkit's bishengir-compile (on PATH:",
             "# source the toolkit's set_env.sh first). triton-adapter-opt already ran: its output is",
             "# each kernel's .ttadapter.mlir.",
             "set -euo pipefail", 'cd "$(dirname "$0")"']
    for ck in kernels:
        shells = [c["shell"] for c in json.loads(ck.asm["handoff"])["commands"]]
        folder = (folders or {}).get(ck.name)
        if folder:
            shells = [f"(cd {shlex.quote(folder)} && {cmd})" for cmd in shells]
        lines += [f"# {ck.name}"] + shells
    return "\n".join(lines) + "\n"


def write_bundle(kernels: Iterable, directory: str, linalg: Optional[dict] = None) -> list[str]:
    """Writes the hand-off of every compiled kernel into `directory` (`kernel_files` per kernel,
    one `build.sh` for all); `linalg` maps kernel name to its linalg text. Returns the paths."""
    kernels = list(kernels)
    os.makedirs(directory, exist_ok=True)
    files: dict[str, str] = {}
    for ck in kernels:
        files.update(kernel_files(ck, (linalg or {}).get(ck.name, "")))
    files["build.sh"] = build_script(kernels)
    written = []
    for name, text in files.items():
        path = os.path.join(directory, name)
        with open(path, "w") as f:
            f.write(text)
        written.append(path)
    os.chmod(os.path.join(directory, "build.sh"), 0o755)
    return written


__all__ = ["ENTRY_KEY", "FORMAT", "LINALG_KEY", "mix_mode", "build_script", "entry_name", "kernel_files", "manifest", "soc_name", "write_bundle"]
