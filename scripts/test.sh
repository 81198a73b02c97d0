#!/usr/bin/env bash
# Set up if needed, then run every test: pytest suites, and the lit/FileCheck suite through pytest.
# Tests are spread over one worker per core (capture and Triton's interpreter are single-threaded);
# each test file stays in one worker, so module fixtures are built once, the longest files first
# (tests/conftest.py FIRST). UNIORCH_TEST_WORKERS=0 runs
# them in this process.
#
# Then, with no arguments given, the files that touch Triton's API (codegen, interpreter, cross
# compiles, bundles, benchmark smoke, the GPU-run rehearsal, Ascend's adapter on Triton's TTIR) run
# again in a second venv with the oldest Triton uniorch supports (UNIORCH_COMPAT_TRITON, default
# 3.6.0: the GPU machine's; 0 skips). That run cross-compiles for the GPU machine's arch only, and
# of the kernel-feature files runs the tests that compile for a GPU (UNIORCH_COMPAT_RUN:
# tests/conftest.py); other targets, and numerics on the interpreter, are checked in the first run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
compat=${UNIORCH_COMPAT_TRITON-3.6.0}
compat_venv=.venv-triton$(echo "$compat" | cut -d. -f1,2 | tr -d .)  # 3.6.0 -> .venv-triton36
if [ $# -eq 0 ] && [ -n "$compat" ] && [ "$compat" != 0 ]; then
  # made first: the main suite also loads bundles across the two Tritons (tests/test_driver_launch.py)
  UNIORCH_VENV=$compat_venv UNIORCH_TRITON_VERSION=$compat bash scripts/setup.sh
fi
if [ -x "$compat_venv/bin/python" ]; then export UNIORCH_COMPAT_PYTHON=$PWD/$compat_venv/bin/python; fi
workers=${UNIORCH_TEST_WORKERS:-$(nproc 2>/dev/null || echo 2)}
if [ "$workers" -gt 4 ]; then workers=4; fi
spread=()
if [ "$workers" -gt 1 ]; then spread=(-n "$workers" --dist loadfile --no-loadscope-reorder); fi
if [ $# -gt 0 ]; then exec .venv/bin/python -m pytest -q "${spread[@]}" "$@"; fi

set +e
# the GPU-run rehearsal (minutes) runs once, in the second run: the GPU machine's Triton
rehearse=()
if [ -n "$compat" ] && [ "$compat" != 0 ]; then rehearse=(UNIORCH_REHEARSAL_IN_COMPAT_RUN=1); fi
# the slowest tests listed last: the suite's time budget is kept by trimming those
env "${rehearse[@]}" .venv/bin/python -m pytest -q "${spread[@]}" --durations=25
main=$?
set -e
if [ -z "$compat" ] || [ "$compat" = 0 ]; then exit $main; fi
echo "[test] the Triton-facing tests again with triton $compat" >&2
set +e
UNIORCH_COMPAT_RUN=1 "$compat_venv/bin/python" -m pytest -q "${spread[@]}" \
  tests/test_codegen_contraction.py tests/test_codegen_generic.py tests/test_codegen_scan.py \
  tests/test_codegen_scatter.py tests/test_codegen_sort.py tests/test_backends_cross.py \
  tests/test_cross_compile_zoo.py tests/test_aot.py tests/test_aot_zoo.py tests/test_bench_smoke.py \
  tests/test_conformance.py tests/test_compile_models.py tests/test_gpu_rehearsal.py \
  tests/test_cann_backend.py tests/test_chain_fusion.py tests/test_sibling_fusion.py tests/test_gated_siblings.py \
  tests/test_kernel_sharing.py tests/test_gated_split.py tests/test_interpreter_fast_paths.py \
  tests/test_triton_launch.py tests/test_bound_launch.py tests/test_shared_memory_fit.py tests/test_compile_ahead.py tests/test_fma_relayout.py \
  tests/test_fp32_precision.py tests/test_causal_bound.py tests/test_aot_specialization.py \
  tests/test_conv_channels_last.py tests/test_gather_prologue.py tests/test_tile_stats.py \
  tests/test_chain_lead.py tests/test_conv_views.py tests/test_scatter_updates.py tests/test_chain_depthwise.py tests/test_depthwise_prologue.py \
  tests/test_attention_lse.py tests/test_relayout_copy.py tests/test_attention_band_split.py tests/test_grouped_mm.py
second=$?
set -e
echo "[test] main suite exit $main; triton $compat suite exit $second" >&2
[ $main -eq 0 ] && [ $second -eq 0 ]
