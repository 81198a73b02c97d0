"""ONNX models through uniorch: exported from PyTorch and built with onnx.helper, compared with
onnxruntime (the reference users run ONNX with) on fresh random inputs."""
import io

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import uniorch
from uniorch.frontends.onnx import OnnxError

ort = pytest.importorskip("onnxruntime")


def _ort(proto, *inputs):
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    return [torch.from_numpy(o) for o in sess.run(None, {n: t.numpy() for n, t in zip(names, inputs)})]


def _export(model, *args, **kw):
    f = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(model.eval(), args, f, dynamo=False, opset_version=17, **kw)
    return onnx.load_from_string(f.getvalue())


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)
        self.ln = torch.nn.LayerNorm(32)

    def forward(self, x):
        return torch.softmax(self.fc2(torch.nn.functional.gelu(self.ln(self.fc1(x)))), dim=-1)


class Conv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))


@pytest.mark.parametrize("model,shape", [(Mlp, (4, 16)), (Conv, (2, 3, 8, 8))], ids=["mlp", "conv-bn"])
def test_exported_from_pytorch_matches_onnxruntime(model, shape, tmp_path):
    proto = _export(model(), torch.randn(shape))
    path = tmp_path / "m.onnx"
    onnx.save(proto, str(path))
    for source in (str(path), proto):  # a path and a ModelProto
        cm = uniorch.compile(source, target="interpret")
        x = torch.randn(shape)
        torch.testing.assert_close(cm(x), _ort(proto, x)[0], rtol=1e-4, atol=1e-5)
    rep = cm.explain(x)
    assert rep.kernels and not rep.fallbacks, str(rep)


def _helper_model():
    """(x @ W + b) * sigmoid(gate) then ReduceSum and a Transpose: built by hand, two outputs."""
    w = numpy_helper.from_array(np.random.randn(6, 5).astype(np.float32), "W")
    b = numpy_helper.from_array(np.random.randn(5).astype(np.float32), "b")
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
        helper.make_node("Add", ["xw", "b"], ["h"], name="bias"),
        helper.make_node("Sigmoid", ["gate"], ["s"], name="sigmoid"),
        helper.make_node("Mul", ["h", "s"], ["y"], name="gate_mul"),
        helper.make_node("ReduceSum", ["y", "axes"], ["total"], keepdims=0, name="sum"),
        helper.make_node("Transpose", ["y"], ["yt"], perm=[1, 0], name="transpose"),
    ]
    graph = helper.make_graph(
        nodes, "gated",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6]),
         helper.make_tensor_value_info("gate", TensorProto.FLOAT, ["batch", 5])],
        [helper.make_tensor_value_info("total", TensorProto.FLOAT, ["batch"]),
         helper.make_tensor_value_info("yt", TensorProto.FLOAT, [5, "batch"])],
        initializer=[w, b, axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_helper_built_model_with_symbolic_batch():
    proto = _helper_model()
    cm = uniorch.compile(proto, target="interpret")
    for batch in (3, 7):
        x, gate = torch.randn(batch, 6), torch.randn(batch, 5)
        got = cm(x, gate=gate)  # inputs by position or by name
        for g, r in zip(got, _ort(proto, x, gate)):
            torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)


def test_onnx_input_errors_are_clear():
    cm = uniorch.compile(_helper_model(), target="interpret")
    with pytest.raises(uniorch.UniorchError, match="missing ONNX input"):
        cm(torch.randn(2, 6))
    with pytest.raises(uniorch.UniorchError, match="'x' has shape .*declares"):
        cm(torch.randn(2, 4), torch.randn(2, 5))
    with pytest.raises(uniorch.UniorchError, match="'x' has dtype torch.float64"):
        cm(torch.randn(2, 6, dtype=torch.float64), torch.randn(2, 5))


def test_corrupt_and_invalid_onnx_files(tmp_path):
    bad = tmp_path / "corrupt.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a protobuf\xff\xff")
    with pytest.raises(OnnxError, match="corrupt.onnx: not a readable ONNX model|corrupt.onnx: invalid ONNX"):
        uniorch.compile(str(bad), target="interpret")
    with pytest.raises(OnnxError, match="no such file"):
        uniorch.compile(str(tmp_path / "missing.onnx"), target="interpret")
    graph = helper.make_graph([helper.make_node("Relu", ["nope"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(OnnxError, match="invalid ONNX model"):
        uniorch.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), target="interpret")


def test_op_uniorch_cannot_compile_falls_back_to_the_reference():
    # Det lowers to scf.for loops no kernel covers: the model runs on the ONNX reference, and explain says so
    graph = helper.make_graph([helper.make_node("Det", ["x"], ["d"], name="det")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                              [helper.make_tensor_value_info("d", TensorProto.FLOAT, [])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    cm = uniorch.compile(proto, target="interpret")
    x = torch.randn(3, 3)
    torch.testing.assert_close(cm(x), _ort(proto, x)[0], rtol=1e-4, atol=1e-5)
    rep = cm.explain(x)
    assert rep.fallbacks and not rep.kernels, str(rep)
    with pytest.raises(uniorch.UniorchError):
        uniorch.compile(proto, target="interpret", fallback="error")(x)


def test_uniorch_opt_takes_onnx(tmp_path):
    from uniorch.tools.opt import main

    path = tmp_path / "gated.onnx"
    onnx.save(_helper_model(), str(path))
    out = io.StringIO()
    assert main([str(path), "--emit", "torch"], stdout=out) == 0
    assert "torch.aten.matmul" in out.getvalue() or "torch.aten.mm" in out.getvalue()
    err = io.StringIO()
    assert main([str(path), "--emit", "scheduled"], stdout=io.StringIO(), stderr=err) == 1
    assert "symbolic dimensions: x['batch', 6]" in err.getvalue()
    static = tmp_path / "mlp.onnx"
    onnx.save(_export(Mlp(), torch.randn(4, 16)), str(static))
    out = io.StringIO()
    assert main([str(static), "--emit", "scheduled"], stdout=out) == 0
    assert "uniorch.kernel" in out.getvalue() and "func.func @main" in out.getvalue()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx file")
    err = io.StringIO()
    assert main([str(bad)], stdout=io.StringIO(), stderr=err) == 1
    assert "bad.onnx" in err.getvalue() and "Traceback" not in err.getvalue()


def test_compile_aot_takes_onnx_and_the_bundle_loads(tmp_path):
    import subprocess
    import sys

    proto = _helper_model()
    x, gate = torch.randn(4, 6), torch.randn(4, 5)
    art = uniorch.compile_aot(proto, (x, gate), target="interpret")
    assert art.kernels and not art.fallbacks
    art.save(str(tmp_path / "gated"))
    x2, gate2 = torch.randn(4, 6), torch.randn(4, 5)  # fresh values, same shapes
    ref = _ort(proto, x2, gate2)
    for g, r in zip(uniorch.load(str(tmp_path / "gated"))(x2, gate2), ref):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)
    # a fresh process with compiling disabled: the bundle needs nothing but itself
    torch.save((x2, gate2, ref), tmp_path / "io.pt")
    code = ("import sys, torch, uniorch, uniorch.runtime.compiler as c\n"
            "c.compile_module = c.compile_graph = None\n"
            "x, g, ref = torch.load(sys.argv[2])\n"
            "out = uniorch.load(sys.argv[1])(x, g)\n"
            "[torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(out, ref)]\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "gated"), str(tmp_path / "io.pt")], check=True)
    with pytest.raises(uniorch.UniorchError, match="compiled for"):
        uniorch.load(str(tmp_path / "gated"))(torch.randn(5, 6), torch.randn(5, 5))


@pytest.mark.parametrize("target,last", [("cuda:sm_90", "cubin"), ("rocm:gfx942", "hsaco")])
def test_compile_aot_of_onnx_for_gpu_targets(target, last):
    art = uniorch.compile_aot(_export(Mlp(), torch.randn(4, 16)), (torch.randn(4, 16),), target=target)
    assert art.kernels and all(isinstance(k.asm[last], bytes) and k.asm[last][:4] == b"\x7fELF" for k in art.kernels)
    assert all("ttir" in k.asm for k in art.kernels)


def test_compile_aot_of_an_onnx_model_it_cannot_compile_is_an_error():
    graph = helper.make_graph([helper.make_node("Det", ["x"], ["d"], name="det")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
                              [helper.make_tensor_value_info("d", TensorProto.FLOAT, [])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    with pytest.raises(OnnxError, match="needs every node compiled"):
        uniorch.compile_aot(proto, (torch.randn(3, 3),), target="interpret")


def test_compile_aot_of_a_node_nothing_lowers_names_the_node():
    """The error said only "lowering torch to linalg failed"; the node was in `.diagnostics`,
    which a traceback does not show."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu_0"),
             helper.make_node("FrobOp", ["r"], ["y"], domain="com.vendor", name="frob_1")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.vendor", 1)],
                              ir_version=10)
    with pytest.raises(OnnxError, match=r"at ONNX node 'frob_1' \(com.vendor.FrobOp\): no lowering for .*onnx.FrobOp"):
        uniorch.compile_aot(proto, (torch.randn(4, 16),), target="interpret")
