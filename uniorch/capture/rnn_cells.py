"""RNN cells on a GPU, captured as their math.

`nn.LSTMCell` and `nn.GRUCell` call ATen's `lstm_cell` / `gru_cell`, whose CUDA path runs fused
kernels over the gate matmuls (`_thnn_fused_lstm_cell`, `_thnn_fused_gru_cell`). torch 2.11's meta
function for the LSTM one reads `.device` of an absent bias, so capturing an `LSTMCell(bias=False)`
failed on the H200 and the whole model ran eagerly. During capture, a cell called on tensors of a
device other than the CPU is computed here, in the ATen ops ATen's own CPU path uses (a linear
layer for the input and one for the hidden state, then the gates): the graph a CPU capture gets.
On the CPU nothing changes. (capture/recurrent.py decomposes the fused kernels too, for graphs
that record them some other way.)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


def _lstm_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    h, c = hx
    gates = F.linear(input, w_ih, b_ih) + F.linear(h, w_hh, b_hh)
    i, f, g, o = gates.chunk(4, 1)
    cy = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(cy), cy


def _gru_cell(input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    i_r, i_z, i_n = F.linear(input, w_ih, b_ih).chunk(3, 1)
    h_r, h_z, h_n = F.linear(hx, w_hh, b_hh).chunk(3, 1)
    z = torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + torch.sigmoid(i_r + h_r) * h_n)
    return (hx - n) * z + n


_CELLS = {torch.lstm_cell: _lstm_cell, torch.gru_cell: _gru_cell}


def _off_cpu(args) -> bool:
    x = args[0] if args else None
    return isinstance(x, torch.Tensor) and x.device.type != "cpu"


class CellsAsMath(TorchFunctionMode):
    """Active while capture traces: cells on a non-CPU device (every device with `everywhere`)
    are their math."""

    def __init__(self, everywhere: bool = False):
        super().__init__()
        self.everywhere = everywhere

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        impl = _CELLS.get(func)
        if impl is not None and (self.everywhere or _off_cpu(args)):
            return impl(*args, **kwargs)
        return func(*args, **kwargs)
