"""Runs the lit/FileCheck suite (tests/filecheck) under pytest: one test, failing with lit's report."""
import os
import subprocess
import sys

import pytest

SUITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "filecheck")


def test_filecheck_suite(tmp_path):
    pytest.importorskip("lit")
    pytest.importorskip("filecheck")
    # The lit package has no `python -m lit`; this is what its console script runs. The suite's
    # lit.cfg.py finds uniorch-opt and filecheck beside this interpreter. exec_root keeps lit's
    # Output/ folders out of the source tree.
    cmd = [sys.executable, "-c", "import sys; from lit.main import main; sys.argv[0] = 'lit'; main()",
           "-v", "--param", f"exec_root={tmp_path}", SUITE]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"lit failed (exit {proc.returncode}):\n{report}"
    assert "Passed:" in report, f"lit ran no tests:\n{report}"
