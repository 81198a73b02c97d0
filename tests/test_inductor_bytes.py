"""torch.compile's bytes moved by Inductor's own count (tools/inductor_bytes.py), the figure the
kernel report sets beside uniorch's. Expected values are worked out from the shapes, not read back."""
from __future__ import annotations

import torch

from uniorch.tools import kernel_report as kr
from uniorch.tools.inductor_bytes import inductor_bytes


def test_pointwise_add_reads_two_writes_one():
    n = 1000
    got = inductor_bytes(lambda x, y: x + y, (torch.randn(n), torch.randn(n)))
    assert (got.bytes_moved, got.kernels, got.graphs) == (3 * 4 * n, 1, 1)


def test_matmul_counts_its_extern_call():
    a, b = torch.randn(16, 32), torch.randn(32, 8)
    got = inductor_bytes(lambda x, y: x @ y, (a, b))
    assert got.bytes_moved == 4 * (16 * 32 + 32 * 8 + 16 * 8)


def test_graph_break_counts_both_graphs():
    def f(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()

    got = inductor_bytes(f, (torch.randn(64),))
    assert got.graphs == 2 and got.bytes_moved == 2 * 2 * 4 * 64


def test_report_sets_torch_compile_beside_uniorch():
    row = kr.measure("mlp", "fp32", vs_inductor=True)
    # any compiler reads each input and writes each output once: torch.compile's count is at least
    # the minimum, which explain derives from the model's tensors, not from Inductor
    assert row["inductor_bytes"] >= row["bytes_minimum"], row
    text = kr.markdown([row], kr.meta(0.0, "interpret"))
    assert "## Against torch.compile" in text and "--vs-inductor" in text
