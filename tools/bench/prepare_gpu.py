"""Builds the folder a GPU run takes along (`.carry/`), on any machine, before the GPU is lent.

    python -m uniorch.tools.bench.prepare_gpu --torch-mlir PACK.tar.xz      # for a cuda:sm_90 machine
    python -m uniorch.tools.bench.prepare_gpu --pack-local --target interpret --carry DIR   # a rehearsal

It holds what the GPU machine lacks and cannot fetch (it has no network):
- torch-mlir for the GPU machine's Python, packed (`torch_mlir-<version>-cp3NN.tar[.xz]`, unpacked
  by `run_gpu.sh`); `--torch-mlir` copies a pack made elsewhere, `--pack-local` packs this Python's;
- ahead-of-time bundles of the zoo models (`bundles/<model>-<dtype>/`, listed in
  `bundles/index.json`, packed as `bundles.tar.xz`), compiled here for the GPU's target, so the
  run checks launches of binaries it did not compile. A model that fails to compile is listed with
  its error, and the run reports it; one eager PyTorch cannot run in a dtype is listed as skipped.

The project tree and this folder travel together under a 64 MiB limit; the total is checked here.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

CARRY_LIMIT = 64 * 1024 * 1024
BUNDLES = "bundles.tar.xz"


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files if not os.path.islink(os.path.join(root, f)))
    return total


def _tree_size(root: str) -> int:
    """Bytes of what travels from the checkout: tracked and untracked-not-ignored files."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return 0
    return sum(_size(os.path.join(root, p)) for p in out.decode().split("\0") if p and os.path.isfile(os.path.join(root, p)))


def python_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def pack_local(carry: str) -> str:
    """This Python's torch_mlir as a plain tar (the layout of a pack: `torch_mlir/` at the top).
    Uncompressed: a rehearsal unpacks it at once, and it never travels."""
    import importlib.util

    spec = importlib.util.find_spec("torch_mlir")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("prepare_gpu: --pack-local: torch_mlir is not installed in this Python")
    pkg = list(spec.submodule_search_locations)[0]
    from importlib.metadata import version

    dest = os.path.join(carry, f"torch_mlir-{version('torch-mlir')}-{python_tag()}.tar")
    with tarfile.open(dest + ".part", "w") as tar:
        tar.add(pkg, arcname="torch_mlir", filter=lambda ti: None if "__pycache__" in ti.name else ti)
    os.replace(dest + ".part", dest)
    return dest


def copy_pack(src: str, carry: str) -> str:
    if not os.path.isfile(src):
        raise SystemExit(f"prepare_gpu: --torch-mlir {src}: no such file")
    name = os.path.basename(src)
    if not name.startswith("torch_mlir"):
        raise SystemExit(f"prepare_gpu: --torch-mlir {src}: expected a torch_mlir-<version>-cp3NN.tar[.xz] pack")
    for old in os.listdir(carry):  # one pack per Python tag: run_gpu.sh picks by tag
        if old.startswith("torch_mlir") and old != name:
            os.remove(os.path.join(carry, old))
    dest = os.path.join(carry, name)
    if not (os.path.exists(dest) and os.path.getsize(dest) == os.path.getsize(src)):
        shutil.copyfile(src, dest)
    return dest


def build_bundles(folder: str, target: str, models: list[str], dtypes: list[str]) -> list[dict]:
    import torch

    import uniorch
    from uniorch.testing import zoo

    from .fp32 import exact_fp32

    os.makedirs(folder, exist_ok=True)
    entries = []
    for name in models:
        for dtype_name in dtypes:
            rel = f"{name}-{dtype_name}"
            entry = {"model": name, "dtype": dtype_name, "dir": rel, "target": target}
            t0 = time.perf_counter()
            try:
                model, args, kwargs = zoo.load(name)
                cast = None if dtype_name == "fp32" else zoo.DTYPES[dtype_name]
                model = zoo.model_to(model, "cpu", cast)
                args, kwargs = zoo.to((args, kwargs), "cpu", cast)
                try:
                    zoo.run_eager(model, args, kwargs)
                except Exception as err:  # noqa: BLE001 - nothing to compare with: the run skips it
                    entry["skipped"] = f"eager fails in {dtype_name}: {type(err).__name__}: {err}"[:400]
                    raise
                # compiled under the settings the GPU run checks against (zoo_check: exact fp32;
                # by default a float32 convolution would take TF32, as cuDNN's does)
                with torch.no_grad(), exact_fp32():
                    art = uniorch.compile_aot(model, args, target=target, kwargs=kwargs)
                art.save(os.path.join(folder, rel))
                entry.update(kernels=len(art.kernels), fallbacks=len(art.fallbacks))
            except Exception as err:  # noqa: BLE001 - recorded; the GPU run reports it as that model's row
                if "skipped" not in entry:
                    entry["error"] = f"{type(err).__name__}: {err}"[:400]
                shutil.rmtree(os.path.join(folder, rel), ignore_errors=True)
            entry["seconds"] = round(time.perf_counter() - t0, 1)
            entries.append(entry)
            state = entry.get("error") or entry.get("skipped") or f"{entry['kernels']} kernels, {entry['fallbacks']} fallbacks"
            print(f"  bundle {rel:32} {entry['seconds']:6.1f}s  {state}", flush=True)
            _write_index(folder, target, entries)
    return entries


def _write_index(folder: str, target: str, entries: list[dict]) -> None:
    import torch

    try:
        import triton
        tv = triton.__version__
    except ImportError:
        tv = None
    index = {"target": target, "torch": torch.__version__, "triton": tv,
             "date": datetime.datetime.now().isoformat(timespec="seconds"), "bundles": entries}
    with open(os.path.join(folder, "index.json"), "w") as f:
        json.dump(index, f, indent=1)


def main(argv=None) -> int:
    from uniorch.testing import zoo

    p = argparse.ArgumentParser(prog="python -m uniorch.tools.bench.prepare_gpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--carry", default=".carry", help="the folder to fill (default .carry, ignored by git)")
    p.add_argument("--torch-mlir", help="a packed torch-mlir for the GPU machine's Python, to copy in")
    p.add_argument("--pack-local", action="store_true", help="pack this Python's torch_mlir instead")
    p.add_argument("--target", default="cuda:sm_90", help="bundles' target (default cuda:sm_90: H100 and H200)")
    p.add_argument("--models", default="", help="comma-separated zoo models for bundles (default: all)")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--no-bundles", action="store_true")
    a = p.parse_args(argv)
    os.makedirs(a.carry, exist_ok=True)
    if a.torch_mlir:
        pack = copy_pack(a.torch_mlir, a.carry)
    elif a.pack_local:
        pack = pack_local(a.carry)
    else:
        packs = [f for f in os.listdir(a.carry) if f.startswith("torch_mlir")]
        if not packs:
            p.error("give --torch-mlir PACK (torch-mlir packed for the GPU machine's Python) or --pack-local")
        pack = os.path.join(a.carry, packs[0])
    print(f"torch-mlir pack: {pack} ({_size(pack) / 2**20:.1f} MiB)", flush=True)
    if not a.no_bundles:
        known = zoo.names()
        models = [m for m in a.models.split(",") if m] or known
        unknown = [m for m in models if m not in known]
        if unknown:
            p.error(f"unknown zoo model {unknown}; known: {', '.join(known)}")
        print(f"bundles for {a.target}: {len(models)} models x {a.dtypes}", flush=True)
        with tempfile.TemporaryDirectory(prefix="uniorch-bundles-") as tmp:
            folder = os.path.join(tmp, "bundles")
            entries = build_bundles(folder, a.target, models, [d for d in a.dtypes.split(",") if d])
            # every stage's text is kept for debugging; it compresses ~20x, binaries ~3x
            dest = os.path.join(a.carry, BUNDLES)
            with tarfile.open(dest + ".part", "w:xz", preset=6) as tar:
                tar.add(folder, arcname="bundles")
            os.replace(dest + ".part", dest)
        shutil.rmtree(os.path.join(a.carry, "bundles"), ignore_errors=True)  # an unpacked set from before
        bad = [e for e in entries if e.get("error")]
        skipped = [e for e in entries if e.get("skipped")]
        print(f"bundles: {len(entries) - len(bad) - len(skipped)} built, {len(bad)} failed, {len(skipped)} skipped "
              f"(eager itself fails), in {dest} ({_size(dest) / 2**20:.1f} MiB; listed in bundles/index.json)")
    root = os.path.dirname(os.path.abspath(a.carry)) if os.path.isabs(a.carry) else os.getcwd()
    carry_size, tree_size = _size(a.carry), _tree_size(root)
    total = carry_size + (tree_size if not a.pack_local else 0)
    print(f"carry {carry_size / 2**20:.1f} MiB + tree {tree_size / 2**20:.1f} MiB = {total / 2**20:.1f} MiB "
          f"(limit {CARRY_LIMIT / 2**20:.0f} MiB)")
    if total > CARRY_LIMIT and not a.pack_local:
        print("prepare_gpu: over the limit: build fewer bundles (--models) or drop bf16 (--dtypes fp32)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
