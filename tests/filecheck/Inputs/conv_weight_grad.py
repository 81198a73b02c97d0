"""A 3x3 convolution's weight gradient (aten.convolution_backward, weight only): 8x8x3x3 outputs summed over
batch 16 x 28 x 28 pixels."""
import torch
def wgrad(x, dy, w):
    return torch.ops.aten.convolution_backward(dy, x, w, [0], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False])[1]
def make():
    torch.manual_seed(0)
    return wgrad, (torch.randn(16, 8, 28, 28), torch.randn(16, 8, 28, 28), torch.randn(8, 8, 3, 3))
