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
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && "$V" -c "import uniorch, torch_mlir, triton, lit, filecheck, transformers, xdist" 2>/dev/null; then
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
