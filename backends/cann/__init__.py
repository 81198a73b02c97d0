"""The Ascend (CANN) backend: Ascend's own TTIR → linalg adapter, then the hand-off to the toolkit.

Its stages after TTIR: "ttadapter", Ascend's `triton-adapter-opt` run on the kernel (the same
passes and flags as triton-ascend, `backends/triton_adapter.py`), and "handoff", a JSON manifest
naming the kernel's entry, its SoC, the adapter command that ran and the one command left, the
CANN toolkit's `bishengir-compile` (`handoff.py`). `write_bundle` lays a set of compiled kernels
out as files (TTIR, ttadapter linalg, uniorch's linalg when known, manifest, build.sh) for
ahead-of-time bundles and `uniorch-opt --dump-dir`.

It never runs kernels: `load`/`load_compiled` raise `BackendError` naming what is missing (the CANN
toolkit, torch_npu, an NPU) and, when all of that is present, that launching is not built yet.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass

from .. import triton_adapter
from ..sdk import Backend, BackendError, KernelOptions, Launcher
from . import handoff
from .handoff import write_bundle


@dataclass(frozen=True)
class CannOptions(KernelOptions):
    """The subset of triton-ascend's NPUOptions that changes the command lines (same defaults
    as its Atlas A2/A3 path)."""

    soc: str = ""  # bishengir-compile --target; "" derives it from the arch (ascend910b3 → Ascend910B3)
    multibuffer: bool = True
    enable_auto_bind_sub_block: bool = True
    enable_nd2nz_on_vector: bool = False
    enable_select_analysis: bool = True
    compile_on_910_95: bool = False
    force_simt_template: bool = False


def _toolkit() -> str:
    """Where the CANN toolkit is, or "" (its set_env.sh exports ASCEND_TOOLKIT_HOME / ASCEND_HOME_PATH)."""
    for var in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"):
        path = os.environ.get(var, "")
        if path and os.path.isdir(path):
            return path
    found = shutil.which("bishengir-compile")
    return os.path.dirname(os.path.dirname(found)) if found else ""


def _missing() -> list[str]:
    """What running kernels on an Ascend NPU needs and this machine lacks, in words."""
    missing = []
    if triton_adapter.missing_reason():
        missing.append(triton_adapter.missing_reason())
    if not _toolkit():
        missing.append("the CANN toolkit (ASCEND_TOOLKIT_HOME unset and bishengir-compile not on PATH)")
    elif not shutil.which("bishengir-compile"):
        missing.append("bishengir-compile on PATH (source the toolkit's set_env.sh)")
    if importlib.util.find_spec("torch_npu") is None:
        missing.append("the torch_npu package (not importable)")
    else:
        try:
            import torch
            import torch_npu  # noqa: F401  registers torch.npu

            if not torch.npu.is_available():
                missing.append("an Ascend NPU (torch_npu sees none)")
        except Exception as err:  # noqa: BLE001 - a broken torch_npu install is "missing" too
            missing.append(f"a working torch_npu ({type(err).__name__}: {err})")
    # Even with everything present, this stub has no launcher: say so rather than pretend.
    missing.append("an NPU launcher in uniorch (the cann backend is a hand-off stub: build the bundle's "
                   "kernels with handoff/build.sh and launch them with triton-ascend)")
    return missing


class CannBackend(Backend):
    name = "cann"
    archs = ("ascend910b", "ascend910b1", "ascend910b2", "ascend910b3", "ascend910b4")
    warp_size = 32  # TTIR is built for Triton's sm_90 front end, whose warps are 32 wide
    device_type = "npu"
    options_class = CannOptions

    @classmethod
    def is_available(cls) -> bool:
        return not _missing()

    @classmethod
    def unavailable_reason(cls) -> str:
        return "missing " + "; ".join(_missing())

    def add_stages(self, stages, options) -> None:
        arch = self.arch

        def make_ttadapter(src, metadata):
            ttir = str(src)
            entry = handoff.entry_name(ttir)
            metadata[handoff.ENTRY_KEY] = entry
            return triton_adapter.run(ttir, entry, options, named_ops=True)

        def make_handoff(src, metadata):
            import json

            return json.dumps(handoff.manifest(str(src), metadata, arch, options), indent=1)

        stages["ttadapter"] = make_ttadapter
        stages["handoff"] = make_handoff

    def handoff_files(self, compiled, linalg: str = "") -> dict:
        """The files of one kernel's hand-off, by name (for AOT bundles and --dump-dir)."""
        return handoff.kernel_files(compiled, linalg)

    def handoff_bundle_files(self, compiled: list) -> dict:
        """`build.sh` for a bundle: each kernel's bishengir-compile commands, in its folder."""
        return {"build.sh": handoff.build_script(compiled, {ck.name: ck.name for ck in compiled})} if compiled else {}

    def load(self, kernel) -> Launcher:
        raise BackendError(f"target 'cann:{self.arch}' cannot run kernels: {self.unavailable_reason()}")

    def load_compiled(self, compiled) -> Launcher:
        raise BackendError(f"target 'cann:{self.arch}' cannot run kernels: {self.unavailable_reason()}")


__all__ = ["CannBackend", "CannOptions", "write_bundle"]
