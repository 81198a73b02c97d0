"""The stage driver: one generated kernel → TTIR → each of a backend's stages, in order.

TTIR comes from Triton's own front end (the kernel's source parsed and lowered by Triton, then
Triton's TTIR passes); after that the backend's `add_stages` decides everything. Every stage's
output is kept (`CompiledKernel.asm`) and cached on disk under a key of source, backend, arch,
options and Triton version, so a second compile of the same kernel reads files instead of running
LLVM, and an ahead-of-time bundle is just these files.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
from typing import Any, Optional

from .sdk import Backend, BackendError, CompiledKernel

FRONT_STAGES = ("triton", "ttir")
LINALG_KEY = "uniorch_linalg"
# Triton options uniorch decides rather than Triton's defaults: FMA contraction stays on (Triton
# 3.9's default, which it warns will flip in 3.10), so a kernel's numerics do not change with the
# Triton version; every Triton parse_options call passes these (unknown keys are ignored by it).
TRITON_PINNED = {"enable_fp_fusion": True}


def _triton_frontend(ks, backend: Backend, options):
    """Triton's front end for one kernel: (TTIR module, metadata, Triton backend, its options)."""
    import triton
    from triton._C.libtriton import ir as tir
    from triton.compiler import ASTSource
    from triton.compiler.compiler import make_backend

    from uniorch.runtime import loader

    fn = loader.load(ks, interpret=False, shared=False)  # its own name: the stages' files and entry are named by it
    # an AOT kernel's specialization, as Triton's JIT would have made it for these arguments
    attrs = {(i,): tb_divisibility() for i in ks.divisible_args()}
    src = ASTSource(fn, signature=ks.signature(), constexprs=ks.compile_constexprs(), attrs=attrs)
    target = backend.triton_target()
    tb = make_backend(target)
    topts = tb.parse_options({"num_warps": options.num_warps, "num_stages": options.num_stages, **TRITON_PINNED})
    context = tir.context()
    tir.load_dialects(context)
    tb.load_dialects(context)
    from .triton_launch import TRITON_LANGUAGE_LOCK

    with TRITON_LANGUAGE_LOCK:  # not while an interpreted kernel has triton.language patched
        module = src.make_ir(target, topts, tb.get_codegen_implementation(topts), tb.get_module_map(), context)
    metadata: dict[str, Any] = {"target": target, **topts.__dict__, "triton_version": triton.__version__}
    stages: dict = {}
    tb.add_stages(stages, topts, src.language)
    module = stages["ttir"](module, metadata)
    return module, metadata


def tb_divisibility() -> list:
    """Triton's attribute for an argument specialized as divisible by 16 (its `parse_attr("D")`)."""
    return [["tt.divisibility", 16]]


@functools.lru_cache(maxsize=None)
def _code_hash(cls) -> str:
    """The backend's own code, in the cache key: a vendor who fixes a stage of their plugin gets
    kernels compiled by the fixed stage, not the disk cache's output of the old one. uniorch's
    backends hash the `backends` package; a plugin its top-level package (or its module)."""
    module = sys.modules.get(cls.__module__)
    path = getattr(module, "__file__", None)
    if not path:
        return ""
    top = cls.__module__.split(".")[0]
    if cls.__module__.startswith(__package__ + "."):
        root = os.path.dirname(os.path.abspath(__file__))
    elif getattr(sys.modules.get(top), "__path__", None) and getattr(sys.modules[top], "__file__", None):
        root = os.path.dirname(os.path.abspath(sys.modules[top].__file__))
    else:
        root = None
    files = ([os.path.join(d, f) for d, _, names in os.walk(root) for f in names if f.endswith(".py")]
             if root else [path])
    h = hashlib.sha256()
    for f in sorted(files):
        try:
            with open(f, "rb") as fh:
                h.update(os.path.relpath(f, root or os.path.dirname(f)).encode() + b"\0" + fh.read())
        except OSError:
            continue
    return h.hexdigest()[:16]


def _key(ks, backend: Backend, options, linalg: str = "") -> str:
    import triton

    text = "\n".join([ks.source, linalg, repr(sorted(ks.constexprs.items())), repr(ks.signature()),
                      repr(ks.specialization), backend.name,
                      backend.arch, options.hash(), triton.__version__, type(backend).__qualname__,
                      getattr(backend, "stages_version", ""), _code_hash(type(backend)),
                      repr(sorted(TRITON_PINNED.items()))])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _cache_dir(key: str) -> str:
    from uniorch import config

    return os.path.join(config.cache_dir(), "compiled", key)


def _jsonable(metadata: dict) -> dict:
    out = {}
    for k, v in metadata.items():
        if hasattr(v, "backend") and hasattr(v, "arch"):  # triton GPUTarget
            v = {"backend": v.backend, "arch": v.arch, "warp_size": v.warp_size}
        try:
            json.dumps(v)
        except TypeError:
            v = repr(v)
        out[k] = v
    return out


def _read_cache(path: str, ks, backend: Backend, wanted: list[str]) -> Optional[CompiledKernel]:
    meta_path = os.path.join(path, "metadata.json")
    if not os.path.exists(meta_path):
        return None
    try:  # an entry being replaced, or damaged, is a miss: compile again
        with open(meta_path) as f:
            info = json.load(f)
        if not set(wanted) <= set(info["stages"]):
            return None
        asm = {}
        for stage in info["stages"]:
            with open(os.path.join(path, f"{ks.fn_name}.{stage}"), "rb") as f:
                data = f.read()
            if hashlib.sha256(data).hexdigest() != info["sha256"][stage]:
                return None  # truncated or altered after it was written: never load it
            asm[stage] = data if stage in info.get("binary", []) else data.decode()
    except (OSError, ValueError, KeyError, UnicodeDecodeError):
        return None
    return CompiledKernel(ks.name, f"{backend.name}:{backend.arch}", ks, asm, info["metadata"])


def _write_cache(path: str, ck: CompiledKernel) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = tempfile.mkdtemp(dir=os.path.dirname(path))
    binary, sums = [], {}
    for stage, out in ck.asm.items():
        if isinstance(out, bytes):
            binary.append(stage)
        data = out if isinstance(out, bytes) else out.encode()
        sums[stage] = hashlib.sha256(data).hexdigest()
        with open(os.path.join(tmp, f"{ck.source.fn_name}.{stage}"), "wb") as f:
            f.write(data)
    with open(os.path.join(tmp, "metadata.json"), "w") as f:
        json.dump({"stages": list(ck.asm), "binary": binary, "sha256": sums, "metadata": ck.metadata}, f, indent=1)
    import shutil

    try:
        os.replace(tmp, path)  # atomic; a concurrent writer of the same key wrote the same files
        return
    except OSError:
        pass
    # `path` exists. An entry with fewer stages (an earlier compile stopped sooner, e.g. at "ttir"
    # for a listing) is replaced, or every later full compile of the kernel would miss the cache.
    if set(ck.asm) > set(_cached_stages(path)) or not _intact(path, ck.source.fn_name):
        trash = tempfile.mkdtemp(dir=os.path.dirname(path))
        try:
            os.replace(path, os.path.join(trash, "old"))
            os.replace(tmp, path)
        except OSError:
            pass
        shutil.rmtree(trash, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)


def _intact(path: str, fn_name: str) -> bool:
    """Whether every stage file of the entry still has the checksum it was written with."""
    try:
        with open(os.path.join(path, "metadata.json")) as f:
            info = json.load(f)
        for stage in info["stages"]:
            with open(os.path.join(path, f"{fn_name}.{stage}"), "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != info["sha256"][stage]:
                    return False
        return True
    except (OSError, ValueError, KeyError):
        return False


def _cached_stages(path: str) -> list[str]:
    try:
        with open(os.path.join(path, "metadata.json")) as f:
            return json.load(f)["stages"]
    except (OSError, ValueError, KeyError):
        return []


def stage_names(backend: Backend) -> list[str]:
    """All stages this backend produces, in order: "triton", "ttir", then its own."""
    stages: dict = {}
    backend.add_stages(stages, backend.parse_options({}))
    return _checked_names(backend, stages)


def _checked_names(backend: Backend, stages: dict) -> list[str]:
    """The stage names, refused with the plugin named where a stage would be lost or misfiled:
    "triton"/"ttir" are the driver's own (Triton's front end ran them; a plugin's function of that
    name never ran), and the names become file suffixes ("v/asm" wrote into a missing folder)."""
    front = [s for s in stages if s in FRONT_STAGES]
    bad = [s for s in stages if not (isinstance(s, str) and s.isidentifier())]
    if front or bad:
        why = (f"stage(s) {front} are the driver's own (it runs Triton's TTIR passes itself)" if front else
               f"stage name(s) {bad} are not identifiers (they name the stages' files)")
        raise BackendError(f"backend '{backend.name}' ({type(backend).__module__}.{type(backend).__qualname__}): "
                           f"{why}; see docs/backend_guide.md, 'Stages'")
    return list(FRONT_STAGES) + list(stages)


def compile_kernel(ks, backend: Backend, stop_after: Optional[str] = None, use_cache: bool = True,
                   linalg: str = "") -> CompiledKernel:
    """Runs `ks` through TTIR and `backend`'s stages (up to `stop_after`, inclusive).

    `linalg`: the kernel's function in uniorch's linalg form, for backends whose toolchain starts
    from linalg rather than TTIR (the stages see it as metadata["uniorch_linalg"])."""
    options = backend.parse_options({"num_warps": ks.num_warps, "num_stages": ks.num_stages})
    stages: dict = {}
    backend.add_stages(stages, options)
    names = _checked_names(backend, stages)
    if stop_after is not None and stop_after not in names:
        raise BackendError(f"backend '{backend.name}' has no stage '{stop_after}'; its stages: {', '.join(names)}")
    wanted = names[: names.index(stop_after) + 1] if stop_after else names
    path = _cache_dir(_key(ks, backend, options, linalg))
    if use_cache:
        hit = _read_cache(path, ks, backend, wanted)
        if hit is not None:
            return hit
    target = f"{backend.name}:{backend.arch}"
    try:
        module, metadata = _triton_frontend(ks, backend, options)
        if linalg:
            metadata[LINALG_KEY] = linalg
    except Exception as err:
        raise BackendError(f"{target}: Triton's front end rejected kernel {ks.name}: {type(err).__name__}: {err}") from err
    asm: dict[str, Any] = {"triton": ks.source, "ttir": str(module)}
    for name in wanted[len(FRONT_STAGES):]:
        try:
            module = stages[name](module, metadata)
        except Exception as err:
            failed = BackendError(f"{target}: stage '{name}' failed for kernel {ks.name}: {type(err).__name__}: {err}")
            # the stages that did run, for dumps and bug reports (uniorch-opt --dump-dir)
            failed.compiled = CompiledKernel(ks.name, target, ks, asm, _jsonable(metadata))
            raise failed from err
        asm[name] = module if isinstance(module, (bytes, str)) else str(module)
    ck = CompiledKernel(ks.name, target, ks, asm, _jsonable(metadata))
    if use_cache:
        _write_cache(path, ck)
    return ck


def cached(ks, backend: Backend) -> Optional[CompiledKernel]:
    """`compile_kernel(ks, backend)`'s result if the disk cache has every stage of it, else None."""
    options = backend.parse_options({"num_warps": ks.num_warps, "num_stages": ks.num_stages})
    return _read_cache(_cache_dir(_key(ks, backend, options)), ks, backend, stage_names(backend))


def sharing_key(ks) -> tuple:
    """What a kernel's compile depends on but its name and comments: kernels with one key are the
    same code (`KernelSource.body_digest`), for backends that compile them once (`shares_kernels`)."""
    return (ks.body_digest(), repr(sorted(ks.constexprs.items())), repr(ks.signature()), repr(ks.specialization),
            ks.num_warps, ks.num_stages)


def shared_as(ck, ks):
    """Another kernel's compile of the same code, for `ks`: its binary's entry keeps the first
    kernel's name, which the metadata gives the launcher. A BackendError is passed on."""
    if isinstance(ck, BackendError):
        return ck
    return CompiledKernel(ks.name, ck.target, ks, {**ck.asm, "triton": ks.source}, ck.metadata)


__all__ = ["cached", "compile_kernel", "stage_names", "shared_as", "sharing_key", "FRONT_STAGES"]
