"""What a model captured on a GPU records, checked without one (the first H200 run found both):

- `F.scaled_dot_product_attention` on CUDA dispatches to cuDNN's, the memory-efficient or the flash
  kernel; capture turns each into attention math (capture/fused_attention.py), so it becomes one
  flash kernel instead of an op left to PyTorch. Their outputs are checked against SDPA on fresh
  inputs, and their shapes and memory layouts against PyTorch's own meta kernels.
- factory ops name the capture's device (`scalar_tensor(..., device=cuda:0)`), which torch-mlir
  lowers only for the CPU; the importer sets every device constant to cpu.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import uniorch
from uniorch.capture import fused_attention as fa

aten = torch.ops.aten


def _bias(b, h, t, dtype=torch.float32):
    m = torch.randn(b, h, t, t).to(dtype)
    m[..., 3:, :2] = float("-inf")  # some keys masked out
    return m


KERNELS = {
    "flash": (aten._scaled_dot_product_flash_attention.default, fa._flash_cuda, False),
    "efficient": (aten._scaled_dot_product_efficient_attention.default, fa._efficient_cuda, True),
    "cudnn": (aten._scaled_dot_product_cudnn_attention.default, fa._cudnn_cuda, True),
}


def _call(name, fn, q, k, v, bias, causal, lse=True):
    if name == "flash":
        return fn(q, k, v, 0.0, causal)
    return fn(q, k, v, bias, lse, 0.0, causal)


@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("heads_inner", [False, True])
def test_layouts_match_pytorch_meta_kernels(name, heads_inner):
    """Output and log-sum-exp have the kernel's shapes, dtypes and strides (a model's later view
    can depend on the output's memory order)."""
    op, ours, takes_bias = KERNELS[name]
    shape = (2, 40, 3, 16) if heads_inner else (2, 3, 40, 16)
    q = torch.empty(shape, device="meta", dtype=torch.bfloat16)
    q = q.transpose(1, 2) if heads_inner else q
    bias = torch.empty(2, 3, 40, 40, device="meta", dtype=torch.bfloat16) if takes_bias else None
    got, want = _call(name, ours, q, q, q, bias, True), _call(name, op, q, q, q, bias, True)
    for a, b in zip(got[:2], want[:2]):
        assert (a.shape, a.stride(), a.dtype) == (b.shape, b.stride(), b.dtype)


@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("causal", [False, True])
def test_outputs_match_sdpa(name, causal):
    _, ours, takes_bias = KERNELS[name]
    q, k, v = (torch.randn(2, 3, 21, 8) for _ in range(3))
    bias = _bias(2, 3, 21) if takes_bias else None
    out, lse = _call(name, ours, q, k, v, bias, causal)[:2]
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, is_causal=causal)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    s = q @ k.transpose(-1, -2) / math.sqrt(8)
    if causal:
        s = s.masked_fill(torch.ones(21, 21, dtype=torch.bool).triu(1), float("-inf"))
    if bias is not None:
        s = s + bias
    want = torch.logsumexp(s, -1)
    got = lse[..., :21].reshape(want.shape)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["efficient", "cudnn"])
def test_cuda_attention_op_compiles_to_one_flash_kernel(name):
    """A graph recording the CUDA op (what capture sees on a GPU) compiles to one flash kernel and
    matches SDPA; the op's fake kernel lets it be captured on CPU tensors."""
    op = KERNELS[name][0]
    q, k, v = (torch.randn(2, 3, 37, 16) for _ in range(3))
    fn = lambda q, k, v: op(q, k, v, None, False, 0.0, True)[0]  # noqa: E731
    cm = uniorch.compile(fn, target="interpret")
    torch.testing.assert_close(cm(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True),
                               rtol=1e-4, atol=1e-5)
    rep = cm.explain(q, k, v)
    assert [kk.kind for kk in rep.kernels] == ["attention"] and not rep.fallbacks, str(rep)


def test_dropout_stays_in_pytorch():
    q = torch.randn(1, 2, 8, 4)
    assert fa._efficient_cuda(q, q, q, None, False, 0.1) is NotImplemented
    assert fa._flash_cuda(q, q, q, 0.1) is NotImplemented


def test_cuda_device_constants_lower():
    """scalar_tensor, empty_strided and arange on cuda:0 (fake tensors: no GPU needed) lower to linalg."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from uniorch.ir.importer import import_graph
    from uniorch.ir.stages import lower

    with FakeTensorMode():
        x = torch.empty(4, 8, device="cuda")

    def f(x):
        s = torch.scalar_tensor(2.0, dtype=torch.float32, device=x.device)
        e = torch.empty_strided((4, 8), (8, 1), device=x.device)
        return x * s + e + torch.arange(8, device=x.device)

    gm = make_fx(f, tracing_mode="fake")(x)
    assert any("cuda" in str(n.kwargs.get("device")) for n in gm.graph.nodes if n.op == "call_function")
    module = import_graph(gm.graph)
    assert '"cuda' not in str(module)
    lower(module, "linalg")


@pytest.mark.parametrize("bias", [True, False])
def test_fused_rnn_cells_match_the_cells(bias):
    """CUDA's fused GRU and LSTM cell kernels, as capture decomposes them, equal nn.GRUCell and
    nn.LSTMCell (which compute the same gates) on fresh inputs."""
    from uniorch.capture import recurrent

    x, h, c = torch.randn(3, 5), torch.randn(3, 7), torch.randn(3, 7)
    gru = torch.nn.GRUCell(5, 7, bias=bias)
    ig, hg = x @ gru.weight_ih.T, h @ gru.weight_hh.T
    hy, ws = recurrent._fused_gru_cell(ig, hg, h, gru.bias_ih, gru.bias_hh)
    torch.testing.assert_close(hy, gru(x, h))
    assert ws.shape == (3, 5 * 7)
    lstm = torch.nn.LSTMCell(5, 7, bias=bias)
    ig, hg = x @ lstm.weight_ih.T, h @ lstm.weight_hh.T
    hy, cy, ws = recurrent._fused_lstm_cell(ig, hg, c, lstm.bias_ih, lstm.bias_hh)
    want_h, want_c = lstm(x, (h, c))
    torch.testing.assert_close(hy, want_h)
    torch.testing.assert_close(cy, want_c)
    assert ws.shape == (3, 4 * 7)



class _Cells(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTMCell(5, 7, bias=False)  # no bias: what torch 2.11's CUDA meta trips on
        self.gru = torch.nn.GRUCell(7, 7)

    def forward(self, x):
        h, c = self.lstm(x)
        return self.gru(h, c)


def test_rnn_cells_off_the_cpu_are_captured_as_their_math(monkeypatch):
    """Cells on a device other than the CPU (meta here, CUDA on a GPU) are traced as capture's own
    math, which equals the cells; on the CPU ATen's path is traced as before."""
    from uniorch.capture import rnn_cells
    from uniorch.capture.trace import capture

    calls = []
    for fn, impl in list(rnn_cells._CELLS.items()):
        monkeypatch.setitem(rnn_cells._CELLS, fn, lambda *a, _impl=impl, **k: calls.append(_impl) or _impl(*a, **k))
    capture(_Cells().to("meta"), (torch.empty(3, 5, device="meta"),))
    assert len(calls) == 2, calls
    calls.clear()
    capture(_Cells(), (torch.randn(3, 5),))
    assert not calls

    m, x = _Cells(), torch.randn(3, 5)
    with rnn_cells.CellsAsMath(everywhere=True):
        got = m(x)
    torch.testing.assert_close(got, m(x))
