"""`lstm` through PyTorch's own decomposition, with h_n and c_n held to the shapes ATen returns.

Why: torch 2.11's per-layer LSTM decomposition (`one_layer_lstm`) ends with `hx.squeeze(1)` on a
hidden state shaped [1, batch, size], where later releases squeeze dim 0. For any batch but 1 the
squeeze does nothing, so each layer's state keeps its leading 1 and the stacked h_n/c_n come out
[layers * directions, 1, batch, size] instead of [layers * directions, batch, size]: a captured
`nn.LSTM` returned states of the wrong rank (eager ran ATen's kernel and was right). Only the shape
is off: the stray dim has size 1, so the elements are already in ATen's order and a reshape to the
shape of the incoming states (which is the shape ATen's schema gives h_n and c_n) is exact. Where
the decomposition is right (torch 2.13, or a batch of 1) the graph is left as it was.

The packed-sequence overload (`lstm.data`) builds its states with `one_layer_lstm_data`, which
has no such squeeze, and GRU and plain RNNs squeeze dim 0 in every release: they need nothing.

On CUDA, `nn.GRUCell` and `nn.LSTMCell` run fused kernels over the two gate matmuls
(`_thnn_fused_gru_cell`, `_thnn_fused_lstm_cell`) that torch-mlir does not lower: the first GPU
run left each GRU step to PyTorch. They are the cell's pointwise math here; the workspace output
(read only by their backward kernels) is laid out as the CUDA kernels lay it.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    from torch._decomp import decomposition_table as torch_table

    out, h_n, c_n = torch_table[aten.lstm.input](
        input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first
    )
    if h_n.shape != hx[0].shape:
        h_n = h_n.reshape(hx[0].shape)
    if c_n.shape != hx[1].shape:
        c_n = c_n.reshape(hx[1].shape)
    return out, h_n, c_n


def _gates(input_gates, hidden_gates, input_bias, hidden_bias):
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    return input_gates, hidden_gates


def _fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    ig, hg = _gates(input_gates, hidden_gates, input_bias, hidden_bias)
    i_r, i_z, i_n = ig.chunk(3, 1)
    h_r, h_z, h_n = hg.chunk(3, 1)
    r = torch.sigmoid(i_r + h_r)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, h_n, hx], 1)   # the CUDA kernel's workspace: r, z, n, h_n, hx


def _fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    ig, hg = _gates(input_gates, hidden_gates, input_bias, hidden_bias)
    i, f, g, o = (ig + hg).chunk(4, 1)
    i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
    cy = f * cx + i * g
    hy = o * torch.tanh(cy)
    return hy, cy, torch.cat([i, f, g, o], 1)   # the CUDA kernel's workspace: the activated gates


TABLE = {aten.lstm.input: _lstm,
         aten._thnn_fused_gru_cell.default: _fused_gru_cell,
         aten._thnn_fused_lstm_cell.default: _fused_lstm_cell}
