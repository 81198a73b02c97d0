#!/usr/bin/env bash
# Set up if needed, then run every test: pytest suites, and the lit/FileCheck suite through pytest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
