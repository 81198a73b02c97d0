# -*- Python -*-
"""lit configuration of uniorch's FileCheck suite, MLIR's way of testing a compiler tool.

    lit -v tests/filecheck                        # or: cmake --build build --target check

Tools come from the environment that runs lit: `uniorch-opt` and `filecheck` (the Python clone of
LLVM's FileCheck) next to the interpreter running lit (a virtual environment's bin/), else on PATH,
else as `python -m ...`. No machine's paths are written here.

Substitutions in RUN lines:
    uniorch-opt            the uniorch-opt console script (through opt_forkserver.py when
                           UNIORCH_LIT_FORKSERVER names its socket: tests/test_lit.py)
    %uniorch-opt-script    the console script, always
    FileCheck, filecheck   the FileCheck clone
    %python                the interpreter running lit
    %models                tests/filecheck/Inputs (the Python model files, `%models/mlp.py:make`)
    %inputs                the same folder, for MLIR inputs shared by .test files
"""
import os
import shlex
import shutil
import sys

import lit.formats

config.name = "uniorch"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "lit.cfg.py", "CMakeLists.txt", "opt_forkserver.py"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
# `--param exec_root=DIR` (CMake passes its build folder) keeps lit's Output/ out of the sources.
config.test_exec_root = lit_config.params.get("exec_root", config.test_source_root)

python = sys.executable
bindir = os.path.dirname(python)


def _tool(script: str, module: str) -> str:
    """The console script beside this interpreter, else on PATH, else `python -m module`."""
    for candidate in (os.path.join(bindir, script), shutil.which(script)):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return shlex.quote(candidate)
    return f"{shlex.quote(python)} -m {module}"


uniorch_opt = _tool("uniorch-opt", "uniorch.tools.opt")
uniorch_opt_script = uniorch_opt
# tests/test_lit.py runs a fork server (opt_forkserver.py) that imports uniorch-opt's modules once:
# the commands then start in milliseconds instead of seconds. `%uniorch-opt-script` is always the
# console script itself.
forkserver = os.environ.get("UNIORCH_LIT_FORKSERVER")
if forkserver:
    uniorch_opt = " ".join(shlex.quote(x) for x in (python, os.path.join(config.test_source_root, "opt_forkserver.py"),
                                                     "run", forkserver))
filecheck = _tool("filecheck", "filecheck")
inputs = os.path.join(config.test_source_root, "Inputs")


def _command(name: str) -> str:
    # the bare word only where a command is named: not inside a path (tests/filecheck/...),
    # a flag, or a longer name
    return r"(?<![\w./%-])" + name.replace("-", r"\-") + r"(?![\w./-])"


# Placed first, before lit's own %s/%S/%p (so %python is not read as %p + "ython").
config.substitutions[:0] = [
    ("%python", shlex.quote(python)),
    ("%models", shlex.quote(inputs)),
    ("%inputs", shlex.quote(inputs)),
    ("%uniorch-opt-script", uniorch_opt_script),
    (_command("uniorch-opt"), uniorch_opt),
    (_command("FileCheck"), filecheck),
    (_command("filecheck"), filecheck),
]

# lit runs tests with a scrubbed environment; these matter to a Python tool (and every UNIORCH_*
# knob, e.g. UNIORCH_TRACEBACK=1 to see an internal error's traceback in a failing test).
for var, value in os.environ.items():
    if var in ("PYTHONPATH", "HOME", "TMPDIR") or var.startswith("UNIORCH_"):
        config.environment[var] = value
# Each uniorch-opt is one process; torch's own thread pool per process only adds contention when
# lit runs tests in parallel.
config.environment["OMP_NUM_THREADS"] = "1"

# Ascend's adapter (scripts/setup.sh puts it in the venv): tests of the cann and cpu backends'
# "ttadapter" stage say `REQUIRES: triton-adapter-opt`.
if any(os.access(os.path.join(d, "triton-adapter-opt"), os.X_OK) for d in (bindir, *os.environ.get("PATH", "").split(os.pathsep))):
    config.available_features.add("triton-adapter-opt")

lit_config.note(f"uniorch-opt: {uniorch_opt}")
lit_config.note(f"FileCheck: {filecheck}")
