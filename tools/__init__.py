"""Command-line tools: `uniorch-opt` (tools/opt.py); benchmarks arrive under tools/bench."""
