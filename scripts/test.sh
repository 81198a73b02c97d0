#!/usr/bin/env bash
# Set up if needed, then run every test: pytest suites, and the lit/FileCheck suite through pytest.
# Tests are spread over one worker per core (most time is Triton's single-threaded interpreter);
# each test file stays in one worker, so module fixtures are built once. UNIORCH_TEST_WORKERS=0 runs
# them in this process.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
workers=${UNIORCH_TEST_WORKERS:-$(nproc 2>/dev/null || echo 2)}
if [ "$workers" -gt 4 ]; then workers=4; fi
if [ "$workers" -le 1 ]; then exec .venv/bin/python -m pytest -q "$@"; fi
exec .venv/bin/python -m pytest -q -n "$workers" --dist loadfile "$@"
