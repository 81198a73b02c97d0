#!/usr/bin/env bash
# One command for a GPU run (tools/bench/README.md), from the project root, with .carry/ taken along:
#   bash tools/bench/run_gpu.sh [OUT] [gpu_session options]    OUT: this argument, else $OUT, else bench/results/session-DATE
#   bash tools/bench/run_gpu.sh --rehearse [OUT] [...]          the same steps here, offline, on the interpreter
# Fill .carry/ first, on any machine: python -m uniorch.tools.bench.prepare_gpu --torch-mlir PACK
#
# Steps: unpack the torch-mlir pack that matches this Python into a site folder, install uniorch
# from this tree with no network and no build isolation (the GPU machine has setuptools, no
# network), then run the stages (gpu_session.py), each under its own budget, all within
# UNIORCH_SESSION_SECONDS (default 570, under a device call's 10 minutes).
#
# The GPU machine's python3 is itself a venv: a venv made from it does not see its torch, so
# uniorch installs into that python3 (PYTHON overrides). The rehearsal builds the same situation
# here: a throwaway interpreter that sees .venv's packages except torch_mlir and uniorch, so the
# unpack and the offline install are exercised for real.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$(pwd)
t0=$(date +%s)
rehearse=0
if [ "${1:-}" = "--rehearse" ]; then rehearse=1; shift; fi
out=${OUT:-}
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then out=$1; shift; fi
out=${out:-bench/results/session-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"; out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/uniorch-gpu-run.XXXXXX")
trap 'rm -rf "$work"' EXIT
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1  # no network there: fail at once, not after time-outs
say() { echo "[run_gpu $(( $(date +%s) - t0 ))s] $*"; }

if [ "$rehearse" = 1 ]; then
  carry=${UNIORCH_CARRY:-$work/carry}
  base=${UNIORCH_REHEARSE_PYTHON:-.venv/bin/python}
  [ -x "$base" ] || { echo "run_gpu.sh --rehearse: $base missing; run bash scripts/setup.sh first" >&2; exit 2; }
  # the packages the GPU machine has, without torch_mlir and uniorch: links in one folder
  seen=$work/system-site; mkdir -p "$seen"
  site=$("$base" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  for entry in "$site"/*; do
    case "$(basename "$entry")" in
      torch_mlir*|uniorch*|__editable__*uniorch*|*.pth) ;;
      *) ln -s "$entry" "$seen/" ;;
    esac
  done
  real=$("$base" -c 'import sys; print(sys._base_executable)')
  "$real" -m venv --without-pip "$work/python"
  echo "$seen" > "$("$work/python/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/system-site.pth"
  PY=${PYTHON:-$work/python/bin/python}
  if [ ! -f "$carry/bundles.tar.xz" ]; then
    say "preparing a rehearsal carry (this Python's torch_mlir, interpret bundles)"
    "$base" -m uniorch.tools.bench.prepare_gpu --carry "$carry" --pack-local --target interpret \
      --models mlp --dtypes fp32 >"$out/prepare.log" 2>&1 \
      || { cat "$out/prepare.log" >&2; exit 1; }
  fi
else
  carry=${UNIORCH_CARRY:-.carry}
  PY=${PYTHON:-python3}
fi
[ -d "$carry" ] || { echo "run_gpu.sh: no $carry/ here; fill it with python -m uniorch.tools.bench.prepare_gpu and take it along" >&2; exit 2; }

tag=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
pack=$(ls "$carry"/torch_mlir-*-"$tag".tar* 2>/dev/null | head -1 || true)
site=$work/site
if [ -n "$pack" ]; then
  mkdir -p "$site"
  say "unpacking $(basename "$pack")"
  tar xf "$pack" -C "$site"
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
elif ! "$PY" -c "import torch_mlir" 2>/dev/null; then
  echo "run_gpu.sh: no torch-mlir pack for $tag in $carry/ ($(ls "$carry" | tr '\n' ' ')) and none installed" >&2
  exit 2
fi
"$PY" -c "import torch_mlir.ir" || { echo "run_gpu.sh: torch_mlir does not import after unpacking $pack" >&2; exit 2; }

say "installing uniorch from this tree (offline)"
"$PY" -m pip install -q --no-deps --no-build-isolation -e . >"$work/pip.log" 2>&1 \
  || { cat "$work/pip.log" >&2; echo "run_gpu.sh: offline install failed" >&2; exit 2; }
bundles=$carry/bundles
if [ -f "$carry/bundles.tar.xz" ]; then
  say "unpacking bundles.tar.xz"
  tar xf "$carry/bundles.tar.xz" -C "$work"
  bundles=$work/bundles
fi
"$PY" -c "import uniorch.tools, uniorch.backends, uniorch.passes" \
  || { echo "run_gpu.sh: uniorch does not import after installing" >&2; exit 2; }
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total \
  --format=csv >"$out/nvidia-smi.csv" 2>&1 || true

left=$(( ${UNIORCH_SESSION_SECONDS:-570} - ($(date +%s) - t0) ))
say "stages, $left s left"
set +e
"$PY" -m uniorch.tools.bench.gpu_session --out "$out" --bundles "$bundles" --deadline "$left" \
  $([ "$rehearse" = 1 ] && echo --rehearse) "$@"
rc=$?
set -e
say "done (exit $rc); results in $out"
exit $rc
