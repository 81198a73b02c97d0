#!/usr/bin/env bash
# The main job: set up if needed, then take the example model through uniorch and print a summary.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec .venv/bin/python -m uniorch.tools.demo "$@"
