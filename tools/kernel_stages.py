"""uniorch-opt's backend stages: each kernel of a scheduled module through its target's stages.

Which stages exist is the backend's business (`uniorch.backends.driver.stage_names`): `--emit`
accepts any stage of `--target`'s backend, prints text stages per kernel under a
`// ===== kN_name =====` header, and never prints a binary stage (cubin, hsaco) to the output
stream: it prints a summary there, and the bytes go to `-o FILE` (one kernel) or `--dump-dir`.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass
from typing import Any, Optional

from uniorch.errors import UniorchError

MODULE_STAGES = ("torch", "linalg", "fused", "scheduled")  # printed as one MLIR module
# e_machine of the ELF binaries backends produce, to name them in a summary
_ELF_MACHINES = {190: "NVIDIA CUDA", 224: "AMD GPU"}


class StageError(UniorchError):
    """A stage that does not exist for the target, or a kernel that failed in one."""


@dataclass
class KernelOutput:
    """One kernel of the module at a stage: its compiled stages, or why it runs eagerly."""

    name: str
    compiled: Any = None  # uniorch.backends.CompiledKernel
    eager_reason: str = ""


def backend_stages(target) -> list[str]:
    """Kernel stages of the target: "triton", "ttir", then its backend's own."""
    from uniorch.backends.driver import stage_names

    return stage_names(target.backend)


def all_stages() -> dict[str, list[str]]:
    """Every kernel stage any registered backend has → the vendors that have it, in order."""
    from uniorch.backends.driver import stage_names
    from uniorch.backends.registry import backends

    found: dict[str, list[str]] = {}
    for vendor, cls in backends().items():
        try:
            names = stage_names(cls())
        except Exception:  # noqa: BLE001 - a broken plugin must not hide the others' stages
            continue
        for s in names:
            found.setdefault(s, []).append(vendor)
    return found


def check_emit(stage: str, target) -> None:
    """Raises StageError unless `stage` is a module stage or one of the target's kernel stages."""
    if stage in MODULE_STAGES:
        return
    mine = backend_stages(target)
    if stage in mine:
        return
    known = all_stages()
    if stage in known:
        raise StageError(f"--emit {stage}: target '{target}' has no stage '{stage}' (targets with it: "
                         f"{', '.join(known[stage])}); its stages: {', '.join(MODULE_STAGES + tuple(mine))}")
    raise StageError(f"unknown stage '{stage}' for --emit; known: {', '.join(MODULE_STAGES + tuple(known))}")


def compile_kernels(module, target, stop_after: Optional[str]) -> list[KernelOutput]:
    """Every kernel of a scheduled module through the target's stages up to `stop_after`
    (all of them when None). A kernel marked `uniorch.unsupported` has no stages: it runs eagerly."""
    from torch_mlir import ir

    from uniorch.backends.driver import compile_kernel
    from uniorch.codegen import generate
    from uniorch.runtime.compiler import kernel_functions

    backend = target.backend
    out = []
    for op in kernel_functions(module):
        name = ir.StringAttr(op.attributes["sym_name"]).value
        if "uniorch.unsupported" in op.attributes:
            out.append(KernelOutput(name, eager_reason=ir.StringAttr(op.attributes["uniorch.unsupported"]).value))
            continue
        try:
            ks = generate(op, str(target))
        except UniorchError as err:
            raise StageError(f"{name}: {err}") from None
        out.append(KernelOutput(name, compile_kernel(ks, backend, stop_after=stop_after,
                                                     linalg=op.get_asm(enable_debug_info=True))))
    return out


def listing(kernels: list[KernelOutput], stage: str) -> str:
    """The text of every kernel at `stage`; a binary stage as a summary per kernel."""
    parts = []
    for k in kernels:
        if k.compiled is None:
            parts.append(f"// ===== {k.name}: no kernel, runs eagerly: {k.eager_reason}")
            continue
        out = k.compiled.asm[stage]
        if isinstance(out, bytes):
            out = (f"// {binary_summary(stage, out)}\n"
                   f"// (binary: write it with -o FILE for one kernel, or --dump-dir DIR for every kernel)")
        parts.append(f"// ===== {k.name} =====\n{out.rstrip()}\n")
    return "\n".join(parts)


def binary_summary(stage: str, blob: bytes) -> str:
    what = "not ELF"
    if blob[:4] == b"\x7fELF" and len(blob) >= 20:
        machine = struct.unpack_from("<H" if blob[5] == 1 else ">H", blob, 18)[0]
        what = f"ELF {'64' if blob[4] == 2 else '32'}-bit, e_machine {machine} ({_ELF_MACHINES.get(machine, 'unknown')})"
    return f"{stage}: {len(blob)} bytes, {what}, sha256 {hashlib.sha256(blob).hexdigest()[:16]}"


def binaries(kernels: list[KernelOutput], stage: str) -> list[tuple[str, bytes]]:
    return [(k.name, k.compiled.asm[stage]) for k in kernels
            if k.compiled is not None and isinstance(k.compiled.asm.get(stage), bytes)]


# -- --dump-dir -------------------------------------------------------------------------------------
def dump(folder: str, module_texts: dict[str, str], module, target) -> None:
    """Writes `folder/module.<stage>.mlir` for each module stage given, then every kernel of the
    scheduled `module` through every stage of the target as `folder/<kernel>/<kernel>.<stage>`
    (plus `<kernel>.json`, the stages' metadata). A kernel that fails keeps the stages it reached
    and gets `<kernel>.error`; the failure is raised after everything else is written."""
    from torch_mlir import ir

    from uniorch.backends.driver import compile_kernel
    from uniorch.codegen import generate
    from uniorch.runtime.compiler import kernel_functions

    os.makedirs(folder, exist_ok=True)
    for stage, text in module_texts.items():
        _write(os.path.join(folder, f"module.{stage}.mlir"), text)
    backend = target.backend
    failures = []
    for op in kernel_functions(module):
        name = ir.StringAttr(op.attributes["sym_name"]).value
        kdir = os.path.join(folder, name)
        os.makedirs(kdir, exist_ok=True)
        if "uniorch.unsupported" in op.attributes:
            _write(os.path.join(kdir, f"{name}.unsupported"),
                   "no kernel, runs eagerly: " + ir.StringAttr(op.attributes["uniorch.unsupported"]).value)
            continue
        try:
            ck = compile_kernel(generate(op, str(target)), backend, linalg=op.get_asm(enable_debug_info=True))
        except UniorchError as err:
            ck = getattr(err, "compiled", None)  # the driver attaches the stages that ran
            _write(os.path.join(kdir, f"{name}.error"), str(err))
            failures.append(f"{name}: {err}")
        if ck is None:
            continue
        for stage, out in ck.asm.items():
            _write(os.path.join(kdir, f"{name}.{stage}"), out)
        _write(os.path.join(kdir, f"{name}.json"), json.dumps(ck.metadata, indent=1, sort_keys=True))
    if failures:
        raise StageError(f"--dump-dir {folder}: " + "; ".join(failures))


def _write(path: str, out) -> None:
    mode = "wb" if isinstance(out, bytes) else "w"
    try:
        with open(path, mode) as f:
            f.write(out if isinstance(out, bytes) or out.endswith("\n") else out + "\n")
    except OSError as err:
        raise StageError(f"could not write '{path}': {err.strerror}") from None


# -- --list-targets ---------------------------------------------------------------------------------
def list_targets() -> str:
    """Every registered target: architectures, stages, and whether kernels can run here."""
    from uniorch.backends.driver import stage_names
    from uniorch.backends.registry import backends
    from uniorch.targets import auto_target

    lines = [f"targets (--target vendor[:arch]); auto = {auto_target()} here"]
    for vendor, cls in backends().items():
        archs = ", ".join(cls.archs) + (f"; any matching {cls.arch_pattern}" if cls.arch_pattern else "")
        try:
            stages = ", ".join(stage_names(cls()))
        except Exception as err:  # noqa: BLE001 - report the plugin's fault, list the rest
            stages = f"? (its add_stages raised {type(err).__name__}: {err})"
        try:
            runs = "yes" if cls.is_available() else f"no: {cls.unavailable_reason()}"
        except Exception as err:  # noqa: BLE001
            runs = f"no: its availability check raised {type(err).__name__}: {err}"
        binary = f" (binary: {cls.binary_stage})" if cls.binary_stage else ""
        lines += [f"  {vendor}", f"    archs:     {archs}", f"    stages:    {stages}{binary}",
                  f"    runs here: {runs}"]
    return "\n".join(lines)
