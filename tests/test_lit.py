"""Runs the lit/FileCheck suite (tests/filecheck) under pytest: one test, failing with lit's report."""
import os
import socket
import subprocess
import sys
import tempfile

import pytest

SUITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "filecheck")


def _forkserver(env: dict):
    """A fork server for the suite's uniorch-opt commands (filecheck/opt_forkserver.py): (process,
    socket path), or None where Unix sockets cannot pass file descriptors."""
    if not hasattr(socket, "send_fds") or not hasattr(os, "fork"):
        return None
    folder = tempfile.mkdtemp(prefix="uniorch-lit-")  # socket paths are limited to ~100 bytes
    path = os.path.join(folder, "opt.sock")
    proc = subprocess.Popen([sys.executable, os.path.join(SUITE, "opt_forkserver.py"), "serve", path],
                            stdout=subprocess.PIPE, env=env, text=True)
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        return None
    return proc, path


def test_filecheck_suite(tmp_path):
    pytest.importorskip("lit")
    pytest.importorskip("filecheck")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    server = _forkserver(env)
    if server is not None:
        env["UNIORCH_LIT_FORKSERVER"] = server[1]
    # The lit package has no `python -m lit`; this is what its console script runs. The suite's
    # lit.cfg.py finds uniorch-opt and filecheck beside this interpreter. exec_root keeps lit's
    # Output/ folders out of the source tree.
    cmd = [sys.executable, "-c", "import sys; from lit.main import main; sys.argv[0] = 'lit'; main()",
           "-v", "--param", f"exec_root={tmp_path}", SUITE]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    finally:
        if server is not None:
            server[0].kill()
            server[0].wait()
            os.unlink(server[1])
            os.rmdir(os.path.dirname(server[1]))
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"lit failed (exit {proc.returncode}):\n{report}"
    assert "Passed:" in report, f"lit ran no tests:\n{report}"
