#!/usr/bin/env bash
# Creates .venv and installs uniorch with its test tools. Idempotent: a second run only checks.
# torch goes in first as a pinned CPU-or-local build, so the `torch>=2.11` floor in pyproject never
# makes pip fetch a CUDA build onto a CPU machine. On a GPU machine, install your torch into .venv
# before running this and it is kept.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
V=.venv/bin/python
stamp=.venv/.uniorch-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && "$V" -c "import uniorch, torch_mlir, triton, lit, filecheck, transformers, xdist" 2>/dev/null; then
  exit 0
fi
echo "[setup] installing into .venv (first run takes a few minutes)" >&2
"$V" -m pip install -q --disable-pip-version-check --upgrade pip setuptools
"$V" -c "import torch" 2>/dev/null || "$V" -m pip install -q --disable-pip-version-check "torch==${UNIORCH_TORCH_VERSION:-2.13.0}"
"$V" -m pip install -q --disable-pip-version-check -e ".[test]"
echo "$want" > "$stamp"
