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


TABLE = {aten.lstm.input: _lstm}
