"""uniorch-opt in-process: what is awkward to say in lit (files, stdin, exit codes, no tracebacks).

The lit suite (tests/filecheck, run by test_lit.py) checks the printed IR and diagnostics; these
call `main(argv, stdout, stderr)` directly, plus one run of the installed console script.
"""
import io
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from uniorch.tools import opt

INPUTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "filecheck", "Inputs")
MM_RELU = os.path.join(INPUTS, "mm_relu.mlir")
MM_SOFTMAX = os.path.join(INPUTS, "mm_softmax.mlir")

GOOD = """\
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}
"""
MALFORMED = """\
func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.addf %a, %a tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = opt.main([str(a) for a in argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# -- success paths ---------------------------------------------------------------------------------
def test_emit_linalg_to_stdout():
    code, out, err = run(MM_RELU, "--emit", "linalg")
    assert code == 0, err
    assert "linalg.matmul" in out and "torch.aten" not in out
    assert err == ""


def test_output_file(tmp_path):
    dest = tmp_path / "out.mlir"
    code, out, err = run(MM_RELU, "-p", "uniorch-torch-to-linalg,func.func(canonicalize,cse)", "-o", dest)
    assert (code, out, err) == (0, "", "")
    text = dest.read_text()
    assert "linalg.matmul" in text and text.endswith("\n")


def test_output_file_not_written_on_error(tmp_path):
    src, dest = write(tmp_path, "bad.mlir", MALFORMED), tmp_path / "out.mlir"
    code, out, err = run(src, "-o", dest)
    assert code == 1 and out == ""
    assert not dest.exists()
    assert err.startswith(f"{src}:2:25: error: expected ':'")


def test_output_is_parseable_again(tmp_path):
    """What uniorch-opt prints, at either stage and with locations, is valid uniorch-opt input."""
    for emit in ("torch", "linalg"):
        first = tmp_path / f"{emit}.mlir"
        assert run(MM_RELU, "--emit", emit, "--mlir-print-debuginfo", "-o", first)[0] == 0
        code, out, err = run(first, "--emit", "linalg")
        assert code == 0, err
        assert "linalg.matmul" in out


def test_stdin(monkeypatch):
    with open(MM_RELU) as f:
        monkeypatch.setattr(sys, "stdin", io.StringIO(f.read()))
    code, out, err = run("-", "--emit", "linalg")
    assert code == 0, err
    assert "linalg.matmul" in out


def test_stdin_error_names_stdin(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(MALFORMED))
    code, out, err = run("-")
    assert code == 1 and out == ""
    assert err.startswith("<stdin>:2:25: error: expected ':'")


def test_split_input_file_output_and_lines(tmp_path):
    src = write(tmp_path, "cases.mlir", GOOD + "\n// -----\n\n" + GOOD.replace("@f", "@g"))
    code, out, err = run(src, "--split-input-file")
    assert code == 0, err
    assert out.count("// -----") == 1 and "@f" in out and "@g" in out
    # a bad third chunk: its line numbers are the original file's
    src = write(tmp_path, "cases.mlir", GOOD + "// -----\n" + GOOD + "// -----\n" + MALFORMED)
    code, out, err = run(src, "--split-input-file")
    assert code == 1
    assert err.startswith(f"{src}:10:25: error: expected ':'")
    # the same line as without splitting (where the parser stops at the first error)
    assert run(src)[2].startswith(f"{src}:10:25: error:")


def test_split_input_file_prints_the_chunks_beside_a_failing_one(tmp_path):
    """As mlir-opt: every chunk that goes through is printed, the failing one's diagnostic beside them."""
    src = write(tmp_path, "cases.mlir", GOOD + "// -----\n" + MALFORMED + "// -----\n" + GOOD.replace("@f", "@g"))
    code, out, err = run(src, "--split-input-file")
    assert code == 1
    assert err.startswith(f"{src}:6:25: error: expected ':'"), err
    assert "@f" in out and "@g" in out and out.count("// -----") == 2
    # a file is still written only when every chunk succeeded
    dest = tmp_path / "out.mlir"
    assert run(src, "--split-input-file", "-o", dest)[:2] == (1, "")
    assert not dest.exists()


def test_pipeline_schedules_for_the_target():
    """`-p ...,uniorch-schedule` schedules for --target, as `--emit scheduled` does (it took the interpreter's)."""
    def kernels(*argv):
        code, out, err = run(MM_SOFTMAX, "--target", "cuda:sm_80", *argv)
        assert code == 0, err
        return [line.strip() for line in out.splitlines() if "func.func private @k" in line]

    piped = kernels("-p", "uniorch-torch-to-linalg,uniorch-preprocess,uniorch-fuse,uniorch-schedule")
    assert piped and piped == kernels("--emit", "scheduled")
    interpret = kernels("--emit", "linalg", "-p", "uniorch-preprocess,uniorch-fuse,uniorch-schedule{target=interpret}")
    assert piped != interpret


def test_scheduled_input_keeps_its_kernels(tmp_path):
    """uniorch-opt's own scheduled output as input: its kernels, not the launch plan's calls fused again."""
    sched = tmp_path / "s.mlir"
    assert run(MM_SOFTMAX, "--emit", "scheduled", "-o", sched)[0] == 0
    code, out, err = run(sched, "--emit", "triton")
    assert code == 0, err
    assert [line.split(" (")[0] for line in out.splitlines() if line.startswith("# =====")] == \
        ["# ===== k0_contraction", "# ===== k1_reduction"]
    code, out, err = run(sched, "--emit", "scheduled")
    assert code == 0, err
    assert out.count("func.func private @k") == 2 and "pointwise" not in out
    code, out, err = run(sched, "--dump-dir", tmp_path / "dump")
    assert code == 0, err
    assert sorted(os.listdir(tmp_path / "dump")) == ["k0_contraction", "k1_reduction", "module.scheduled.mlir"]
    code, out, err = run(sched, "--emit", "fused")
    assert code == 1 and out == ""
    assert err.startswith(f"{sched}:1:1: error: --emit fused: the input is already at stage 'scheduled'"), err


def test_unlowered_aten_op_is_named(tmp_path):
    src = write(tmp_path, "eig.mlir", """\
        func.func @f(%a: !torch.vtensor<[4,4],f32>) -> !torch.vtensor<[4],complex<f32>> {
          %0:2 = torch.operator "torch.aten.linalg_eig"(%a) : (!torch.vtensor<[4,4],f32>)
              -> (!torch.vtensor<[4],complex<f32>>, !torch.vtensor<[4,4],complex<f32>>)
          return %0#0 : !torch.vtensor<[4],complex<f32>>
        }
        """)
    code, out, err = run(src, "--emit", "linalg")
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0].startswith(f"{src}:2:10: error: failed to legalize operation 'torch.operator'"), err
    assert lines[1] == (f"{src}:2:10: note: aten.linalg_eig has no lowering to linalg; "
                        "uniorch.compile runs it in PyTorch")


def test_debuginfo_names_the_input_file(tmp_path):
    src = write(tmp_path, "f.mlir", GOOD)
    code, out, err = run(src, "--mlir-print-debuginfo")
    assert code == 0, err
    assert f'loc("{src}":1:1)' in out
    assert 'loc("-"' not in out


def test_timing_and_op_stats_go_to_stderr():
    code, out, err = run(MM_RELU, "-p", "uniorch-torch-to-linalg,uniorch-op-stats{group-by=dialect}", "--timing")
    assert code == 0
    assert "linalg.matmul" in out and "uniorch-op-stats" not in out and "Execution time report" not in out
    assert "// uniorch-op-stats (group-by=dialect)" in err
    assert "Execution time report" in err and "uniorch-torch-to-linalg" in err


def test_print_ir_goes_to_stderr():
    code, out, err = run(MM_RELU, "-p", "uniorch-torch-to-linalg,func.func(cse)", "--print-ir-after-all")
    assert code == 0
    assert "IR Dump" not in out
    assert err.count("// -----// IR Dump After") == 2


def test_help_and_list_passes():
    code, out, err = run("--help")
    assert (code, err) == (0, "")
    assert out.startswith("usage: uniorch-opt")
    code, out, err = run("--list-passes")
    assert (code, err) == (0, "")
    assert "uniorch-torch-to-linalg" in out and "canonicalize" in out


def test_python_model_in_process():
    code, out, err = run(os.path.join(INPUTS, "mlp.py"), "--emit", "torch")
    assert code == 0, err
    assert "torch.aten.mm" in out and 'uniorch.model = "MLP"' in out


# -- every error: exit 1, a diagnostic, nothing on stdout, no traceback ------------------------------
ERRORS = {
    "missing file": (["does-not-exist.mlir"], "uniorch-opt: error: could not open input file 'does-not-exist.mlir'"),
    "missing model file": (["does_not_exist.py:make"], "could not open input file 'does_not_exist.py'"),
    "directory": ([INPUTS], "is not a uniorch bundle: it has no manifest.json"),
    "no input": ([], "uniorch-opt: error: no input given"),
    "unknown flag": ([MM_RELU, "--frobnicate"], "uniorch-opt: error: unrecognized arguments: --frobnicate"),
    "flag without value": ([MM_RELU, "--emit"], "uniorch-opt: error: argument --emit: expected one argument"),
    "unknown stage": ([MM_RELU, "--emit", "tosa"], "unknown stage 'tosa' for --emit"),
    "stage of another target": ([MM_RELU, "--emit", "cubin"],
                                "--emit cubin: target 'interpret:cpu' has no stage 'cubin' (targets with it: cuda)"),
    "unknown pass": ([MM_RELU, "-p", "cse,canonicalise"], "did you mean 'canonicalize'?"),
    "unknown uniorch option": ([MM_RELU, "-p", "uniorch-op-stats{by=op}"], "its options: group-by"),
    "bad uniorch value": ([MM_RELU, "-p", "uniorch-torch-to-linalg{allow-non-finites=2}"], "expects bool, got '2'"),
    "bad group-by": ([MM_RELU, "-p", "uniorch-op-stats{group-by=x}"], "must be op, module or dialect, not 'x'"),
    "bad upstream option": ([MM_RELU, "-p", "canonicalize{max-iterations=x}"], "'x' value invalid for long argument"),
    "unknown upstream option": ([MM_RELU, "-p", "cse{foo=1}"], "no such option foo"),
    "unbalanced": ([MM_RELU, "-p", "func.func(cse"], "unbalanced brackets"),
    "nested uniorch pass": ([MM_RELU, "-p", "func.func(uniorch-op-stats)"], "put it at the top level"),
    "verify-linalg on torch": ([MM_RELU, "-p", "uniorch-verify-linalg"], "mm_relu.mlir:3:8: error: 'torch.aten.mm' is not part"),
    "split on a model": ([os.path.join(INPUTS, "mlp.py"), "--split-input-file"], "--split-input-file applies to .mlir inputs"),
    "onnx": (["model.onnx"], "model.onnx: no such file"),
    "unwritable output": ([MM_RELU, "-o", os.path.join(INPUTS, "no-such-dir", "x.mlir")], "could not write output file"),
    "missing factory": ([os.path.join(INPUTS, "mlp.py") + ":build"], "has no function 'build' (functions defined there: MLP, make)"),
    "factory raises": ([os.path.join(INPUTS, "factory_raises.py")], "factory_raises.py:6:5: error: while running"),
    "shape error": ([os.path.join(INPUTS, "shape_error.py") + ":make"], "shape_error.py:13:16: error: capturing the model"),
    "dump-dir is a file": ([MM_RELU, "--dump-dir", MM_RELU],
                           f"could not create dump directory '{MM_RELU}': File exists"),
    "dump-dir under a file": ([MM_RELU, "--dump-dir", os.path.join(MM_RELU, "d")],
                              f"could not create dump directory '{os.path.join(MM_RELU, 'd')}': Not a directory"),
    "schedule target unknown": ([MM_SOFTMAX, "-p", "uniorch-schedule{target=bogus}"],
                                "pass 'uniorch-schedule' option 'target': unknown target 'bogus'; known targets: auto"),
    "schedule arch unknown": ([MM_SOFTMAX, "-p", "uniorch-schedule{target=cuda:sm_99}"],
                              "option 'target': unknown cuda architecture 'sm_99'"),
    "a variant before sm_90": ([MM_RELU, "--target", "cuda:sm_80a"],
                               "--target: unknown cuda architecture 'sm_80a'; known:"),
    "print-ir pass not run": ([MM_RELU, "-p", "func.func(cse)", "--print-ir-before=csee"],
                              "--print-ir-before=csee: no pass 'csee' in the pipeline; its passes: func.func(cse)"),
    "print-ir no pipeline": ([MM_RELU, "--print-ir-after=cse"], "--print-ir-after=cse: no pass 'cse' in the pipeline; "
                             "its passes: none"),
}


@pytest.mark.parametrize("argv,expected", ERRORS.values(), ids=ERRORS.keys())
def test_errors(argv, expected, capfd):
    code, out, err = run(*argv)
    assert code == 1, err
    assert out == ""
    assert expected in err
    assert "Traceback" not in err
    # nothing bypassed our stderr: LLVM writes to fd 2 directly, Python code to sys.stderr
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == "", captured


@pytest.mark.parametrize("text,where", [
    (MALFORMED, "2:25: error: expected ':'"),
    ("func.func @f(%a: tensor<4xf32>) -> tensor<8xf32> {\n  return %a : tensor<4xf32>\n}\n", "2:3: error: type of return operand 0"),
    ("module {\n  func.func @f(\n", "2:16: error: expected non-function type"),
    ("\x01garbage", "1:1: error: unexpected character"),
    ("garbage\n", "1:1: error: custom op 'garbage' is unknown"),
])
def test_bad_mlir(tmp_path, text, where):
    src = write(tmp_path, "in.mlir", text)
    code, out, err = run(src)
    assert code == 1 and out == ""
    assert err.startswith(f"{src}:{where}"), err
    assert "Traceback" not in err


def test_not_utf8(tmp_path):
    src = tmp_path / "bin.mlir"
    src.write_bytes(b"\xff\xfe\x00garbage")
    code, out, err = run(src)
    assert code == 1 and "is not UTF-8 text" in err


def test_user_syntax_error_points_at_the_line(tmp_path):
    src = write(tmp_path, "broken.py", """\
        import torch


        def make(:
            return None
        """)
    code, out, err = run(f"{src}:make")
    assert code == 1
    assert err.startswith(f"{src}:4:10: error: while running"), err
    assert "SyntaxError" in err and "Traceback" not in err


def test_factory_returning_wrong_type(tmp_path):
    src = write(tmp_path, "wrong.py", """\
        def make():
            return 42
        """)
    code, out, err = run(src)
    assert code == 1
    assert err.startswith(f"{src}:1:1: error: factory 'make' must return (model, args)"), err


def test_user_sys_exit_is_an_error_not_an_exit(tmp_path):
    src = write(tmp_path, "exits.py", """\
        import sys


        def make():
            sys.exit(3)
        """)
    code, out, err = run(src)
    assert code == 1
    assert f"{src}:5:5: error: while running" in err and "SystemExit" in err


def test_internal_error_is_one_line_unless_asked(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(opt, "_run", boom)
    monkeypatch.delenv("UNIORCH_TRACEBACK", raising=False)
    code, out, err = run(MM_RELU)
    assert code == 1
    assert err.startswith("uniorch-opt: internal error: RuntimeError: kaboom")
    assert "Traceback" not in err
    monkeypatch.setenv("UNIORCH_TRACEBACK", "1")
    with pytest.raises(RuntimeError, match="kaboom"):
        run(MM_RELU)


# -- the installed tool, as a user runs it -----------------------------------------------------------
def _console_script():
    here = os.path.join(os.path.dirname(sys.executable), "uniorch-opt")
    return here if os.path.isfile(here) else shutil.which("uniorch-opt")


def test_console_script_on_a_failing_model():
    exe = _console_script()
    if exe is None:
        pytest.skip("uniorch-opt is not installed (pip install -e .)")
    model = os.path.join(INPUTS, "factory_raises.py")
    proc = subprocess.run([exe, f"{model}:make"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith(f"{model}:6:5: error: while running '{model}:make': FileNotFoundError"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_mlir_input_does_not_import_torch():
    """uniorch-opt on MLIR text starts in well under a second: torch (seconds to import) stays out."""
    code = ("import io, sys\n"
            "from uniorch.tools import opt\n"
            f"rc = opt.main([{MM_RELU!r}, '-p', 'uniorch-torch-to-linalg,uniorch-verify-linalg'], io.StringIO(), sys.stderr)\n"
            "assert rc == 0\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
