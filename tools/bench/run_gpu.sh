#!/usr/bin/env bash
# Run the full benchmark on a CUDA machine: bash tools/bench/run_gpu.sh [extra bench args]
# e.g. bash tools/bench/run_gpu.sh --dtype bf16 --merge   (chunks accumulate into one JSON)
# Uses .venv, creating it with the system's packages visible so a machine's preinstalled CUDA
# torch is kept (scripts/setup.sh keeps any torch it finds). Installing is best effort: on a
# machine without network the roofline PNG is skipped if matplotlib is absent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
[ -x .venv/bin/python ] || python3 -m venv --system-site-packages .venv
PY=.venv/bin/python
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "run_gpu.sh: torch in .venv sees no CUDA device; install a CUDA build of torch into .venv first" >&2
  exit 1
fi
bash scripts/setup.sh || echo "run_gpu.sh: setup.sh failed (offline?); going on with what .venv has" >&2
"$PY" -m pip install -q --disable-pip-version-check -e ".[bench]" 2>/dev/null \
  || echo "run_gpu.sh: could not install the bench extra; the roofline PNG may be skipped" >&2
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv
"$PY" -m uniorch.tools.bench --device cuda "$@"
# a device session collects what is under $OUT
if [ -n "${OUT:-}" ]; then cp bench/results/*-cuda.json bench/results/*-cuda.png "$OUT"/ 2>/dev/null || true; fi
