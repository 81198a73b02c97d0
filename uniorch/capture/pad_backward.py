"""The gradient of replicate padding as ATen ops that lower.

`nn.Conv2d(padding_mode="replicate")` and `F.pad(mode="replicate")` train through
`replication_pad{1,2,3}d_backward`, which neither PyTorch decomposes nor torch-mlir lowers: the op
ran in PyTorch between the backward's kernels ("lowering to torch backend contract failed").
Each padded position copies the nearest edge element, so, one padded dim at a time, the input's
gradient is the output gradient's centre with every padded position's gradient summed into the
edge element it copied: slices, two sums and a concatenation. (Reflect padding's backward has
PyTorch's own decomposition.)
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _replication_pad_backward(grad, x, padding):
    if any(p < 0 for p in padding):  # a negative pad crops: left to PyTorch's op
        return NotImplemented
    for i in range(len(padding) // 2):  # pairs from the last dim on, as F.pad takes them
        axis = grad.dim() - 1 - i
        left, right, n = padding[2 * i], padding[2 * i + 1], x.shape[axis]
        if not left and not right:
            continue
        if n == 1:  # every position copies the one element
            grad = grad.sum(axis, keepdim=True)
            continue
        head = grad.narrow(axis, 0, left + 1).sum(axis, keepdim=True)
        middle = grad.narrow(axis, left + 1, n - 2)
        tail = grad.narrow(axis, left + n - 1, right + 1).sum(axis, keepdim=True)
        grad = torch.cat([head, middle, tail], axis)
    return grad


TABLE = {
    aten.replication_pad1d_backward.default: _replication_pad_backward,
    aten.replication_pad2d_backward.default: _replication_pad_backward,
    aten.replication_pad3d_backward.default: _replication_pad_backward,
}
