"""A region whose compile fails without naming the op to blame (torch-mlir reports the constant it
built for the op's arguments) is halved until the failing op is alone: that op runs in PyTorch and
the rest still compiles."""
import torch

from uniorch.runtime.compiler import RegionError, compile_graph
from uniorch.runtime.partition import compile_program
from uniorch.capture.trace import capture
from uniorch.targets import parse_target


def _model(x, w):
    a = torch.relu(x) * 2 + 1
    b = torch.sin(a) * w  # the op that "fails" below
    c = torch.tanh(b) - a
    return c.sum(-1) + b.mean(-1)


def test_failure_naming_every_node_is_narrowed_to_the_op():
    x, w = torch.randn(4, 8), torch.randn(8)
    gm = capture(_model, (x, w)).graph_module
    attempts = []

    def compile_region(sub, target, kernel_prefix=""):
        attempts.append(len(sub.graph.nodes))
        names = [n.name for n in sub.graph.nodes if n.op == "call_function"]
        if any(n.op == "call_function" and n.target is torch.ops.aten.sin.default for n in sub.graph.nodes):
            raise RegionError("import", "lowering torch to linalg failed", names)  # every node blamed
        return compile_graph(sub, target, kernel_prefix=kernel_prefix)

    program = compile_program(gm, parse_target("interpret"), compile_region=compile_region)
    assert [f.ops for f in program.fallbacks] == [["aten.sin.default"]]
    assert program.compiled_nodes == {n.name for n in gm.graph.nodes if n.op == "call_function"} - {
        n for f in program.fallbacks for n in f.nodes}
    fresh = torch.randn(4, 8), torch.randn(8)
    outs = program(*fresh)
    torch.testing.assert_close(outs[0], _model(*fresh), rtol=1e-5, atol=1e-6)
