"""Ops whose lowering in torch-mlir crashed the whole process (a segmentation fault, an LLVM
abort), not a fallback: run in a child process, so a crash is this test's failure and not the
suite's. Each compares with eager on fresh inputs."""
import subprocess
import sys
import textwrap

import pytest

CASES = {
    # a whole byte tensor's max/min: a segmentation fault in the linalg pipeline (decompositions._byte_max_min)
    "uint8_max": "u = torch.randint(0, 256, (3, 7)).to(torch.uint8); check(lambda u: (u.max(), u.min()), u)",
    "int8_min": "i = torch.randint(-128, 128, (5,)).to(torch.int8); check(lambda i: (i.min(), i.max() + 1), i)",
    # a complex tensor's mean over every element: LLVM ERROR, abort (decompositions._half_mean)
    "complex_mean": "z = torch.randn(3, 4, dtype=torch.complex64); check(lambda z: z.mean() * 2, z)",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiles_without_crashing_the_process(case):
    code = textwrap.dedent("""
        import torch, uniorch
        def check(fn, *args):
            got, want = uniorch.compile(fn, target="interpret")(*args), fn(*args)
            torch.testing.assert_close(got, want)
            print("MATCHED")
    """) + CASES[case] + "\n"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "MATCHED" in run.stdout, (run.returncode, run.stderr[-2000:])


def test_an_onnx_unique_of_values_only_compiles_without_crashing_the_process():
    """ONNX Unique asked for Y only: torch-mlir's conversion reads the optional outputs too and
    segfaulted compile, compile_aot and uniorch-opt (frontends/onnx._optional_outputs_named)."""
    pytest.importorskip("onnx")
    code = textwrap.dedent("""
        import onnx, torch, uniorch
        from onnx import helper as h, TensorProto as T
        g = h.make_graph([h.make_node("Unique", ["x"], ["y"], sorted=1, name="uniq")], "g",
                         [h.make_tensor_value_info("x", T.FLOAT, [6])],
                         [h.make_tensor_value_info("y", T.FLOAT, [None])])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
        x = torch.tensor([3.0, 1, 3, 2, 1, 5])[torch.randperm(6)]
        got = uniorch.compile(m, target="interpret")(x)
        torch.testing.assert_close(got, torch.unique(x))
        try:
            uniorch.compile_aot(m, (x,), target="interpret")
        except Exception as err:
            print(type(err).__name__, err)
        print("MATCHED")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "MATCHED" in run.stdout, (run.returncode, run.stderr[-2000:])
    assert "OnnxError lowering torch to linalg failed" in run.stdout, run.stdout
