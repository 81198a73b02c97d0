"""Every UNIORCH_* environment knob, in one place (README lists them). Read at use, never cached."""
from __future__ import annotations

import os

KNOBS = {
    "UNIORCH_TRACEBACK": "1: tools print Python tracebacks for internal errors (for bug reports)",
    "UNIORCH_SLOW_TESTS": "1: the test suite also runs every zoo model through the interpreter (slow)",
    "UNIORCH_FUZZ_EXAMPLES": "N: tests/test_fuzz.py draws N random graphs per test instead of its small fixed set",
    "UNIORCH_CACHE_DIR": "where compiled kernels are cached (default: ~/.cache/uniorch)",
    "UNIORCH_COMPILE_WORKERS": "N: processes that compile the cpu target's kernels ahead of a graph's first run "
                               "(default: the usable CPUs, at most 8; 0 or 1: compile in the calling process)",
    "UNIORCH_FALLBACK_RANDOM": "1: random ops (dropout's masks, rand, randn, ...) run in PyTorch and draw exactly eager's "
                               "numbers, as Inductor's fallback_random (default: kernels draw from a seed of PyTorch's generator)",
    "UNIORCH_AUTOTUNE": "1: contraction kernels on a GPU try a few tile configurations at their first call and keep "
                        "the fastest, cached on disk (runtime/autotune.py); force: on the CPU targets too (tests)",
    "UNIORCH_TRITON_LAUNCH": "jit: every GPU launch goes through Triton's JITFunction.run (default: after the first, the "
                             "compiled kernel's launcher directly, backends/triton_launch.py)",
    "UNIORCH_TRITON_ADAPTER": "Ascend's triton-adapter-opt for the cann and cpu backends (default: the venv's bin/, then PATH)",
    # read by scripts/setup.sh, listed here so every knob is in one place
    "UNIORCH_TORCH_VERSION": "torch version scripts/setup.sh installs when .venv has none (default 2.13.0)",
    "UNIORCH_VENV": "the venv scripts/setup.sh creates or checks (default .venv)",
    "UNIORCH_TRITON_VERSION": "triton version scripts/setup.sh pins (default: what pip resolves)",
    "UNIORCH_COMPAT_TRITON": "triton version scripts/test.sh runs the Triton-facing tests again with (default 3.6.0; 0 skips)",
    "UNIORCH_COMPAT_PYTHON": "that venv's python, exported by scripts/test.sh for tests that build bundles under it",
    "UNIORCH_COMPAT_RUN": "set by scripts/test.sh for its second run: GPU-machine arch and compile checks only (tests/conftest.py)",
    "UNIORCH_REHEARSAL_IN_COMPAT_RUN": "set by scripts/test.sh when its second run will rehearse the GPU run (the first skips it)",
    "UNIORCH_LIT_FORKSERVER": "socket of the fork server tests/test_lit.py starts for the lit suite's uniorch-opt commands",
    # read by tools/bench/run_gpu.sh
    "UNIORCH_CARRY": "the folder run_gpu.sh takes bundles and the torch-mlir pack from (default .carry)",
    "UNIORCH_SESSION_SECONDS": "run_gpu.sh's whole budget, setup included (default 570, under a device call's 10 min)",
    "UNIORCH_REHEARSE_PYTHON": "the interpreter whose packages run_gpu.sh --rehearse stands in for the GPU machine's (default .venv)",
}


def flag(name: str) -> bool:
    assert name in KNOBS, f"undeclared knob {name}"
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def cache_dir() -> str:
    wanted = os.environ.get("UNIORCH_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "uniorch")
    return _usable(wanted)


_checked: dict[str, str] = {}


def _usable(path: str) -> str:
    """`path` when it is (or can be made) a writable folder; else, with one warning naming it, a
    temporary folder for this process. An unusable cache (a file at that path, no permission) made
    every kernel an eager fallback blamed on Triton's front end, without a word about the cache."""
    if path in _checked:
        return _checked[path]
    why = "it is a file, not a folder" if os.path.exists(path) and not os.path.isdir(path) else ""
    try:
        if not why:
            os.makedirs(path, exist_ok=True)
        if not why and not os.access(path, os.W_OK | os.X_OK):
            why = "it is not writable"
    except OSError as err:
        why = err.strerror or str(err)
    if why:
        import tempfile
        import warnings

        fallback = tempfile.mkdtemp(prefix="uniorch-cache-")
        warnings.warn(f"uniorch: the kernel cache folder {path!r} (UNIORCH_CACHE_DIR) cannot be used: {why}; "
                      f"kernels are cached in {fallback} for this process only", RuntimeWarning, stacklevel=3)
        _checked[path] = fallback
    else:
        _checked[path] = path
    return _checked[path]
