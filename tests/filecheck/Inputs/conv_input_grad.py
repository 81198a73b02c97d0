"""The input gradients of two 3x3 convolutions in one backward graph, as AOTAutograd hands them
over: aten.convolution_backward with the input's output mask, the second through ReLU's backward.
torch-mlir flips and transposes each filter by a gather and pads each gradient by inserting it into
one zero fill the two share."""
import torch


def grads(dy, w2, h, w1):
    op = torch.ops.aten.convolution_backward
    dh = op(dy, h, w2, [0], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, False, False])[0]
    dh = torch.ops.aten.threshold_backward(dh, h, 0)
    return op(dh, h, w1, [0], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, False, False])[0]


def make():
    torch.manual_seed(0)
    return grads, (torch.randn(2, 8, 6, 6), torch.randn(8, 8, 3, 3), torch.randn(2, 8, 6, 6).relu(),
                   torch.randn(8, 8, 3, 3))
