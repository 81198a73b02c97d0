"""Gradients of grouped and transposed convolutions (`convolution_backward`) as forward convolutions.

torch-mlir lowers `convolution_backward` only for an ungrouped, non-transposed convolution; a
depthwise block (MobileNet), a grouped one or a transposed one (U-Net's upsampling) lost its
backward to PyTorch. Each gradient is itself a convolution:

- the input's: the transposed convolution with the same weight (of a transposed convolution: the
  plain one), output padding chosen to give back the input's size;
- the weight's, for a plain convolution: gw[g·Co+o, c, k] = Σ_n Σ_y dy[n, g·Co+o, y] x[n, g·Ci+c, y·s + k·d − p],
  a convolution over x with dy as its kernel: the batch becomes the channels (grouped by g, so no
  cross-group products are computed), stride and dilation trade places, the padding stays, and
  the result is cropped to the kernel's size. A transposed convolution's weight gradient is the
  same formula with x and dy trading places;
- the bias's: dy summed over every dim but the channels.

torch-mlir's transposed convolution fails when each group has one output channel (a depthwise
one, as the input gradient of a depthwise convolution is), and so does its plain 3-d depthwise
convolution (one input and one output channel per group: MViT's pooling of q, k and v; 1-d and
2-d ones go to linalg's depthwise ops): there each group gets a second output channel of zero
weights, and every other channel of the result is kept.
"""
from __future__ import annotations

import torch
from torch._prims_common import suggest_memory_format

aten = torch.ops.aten


def _weight_grad(x, dy, kernel, stride, padding, dilation, groups):
    """dL/dw of y = conv(x, w) (w: (G·Co, Ci, *kernel)) from x (N, G·Ci, *in) and dy (N, G·Co, *out)."""
    n, gci = x.shape[:2]
    gco = dy.shape[1]
    ci, co = gci // groups, gco // groups
    nd = len(kernel)
    # x as (Ci, G·N, *in): batch Ci, channels grouped by g; dy as (G·Co, N, *out): one kernel per output channel
    xs = x.reshape(n, groups, ci, *x.shape[2:]).permute(2, 1, 0, *range(3, 3 + nd)).reshape(ci, groups * n, *x.shape[2:])
    ks = dy.reshape(n, groups, co, *dy.shape[2:]).permute(1, 2, 0, *range(3, 3 + nd)).reshape(groups * co, n, *dy.shape[2:])
    out = aten.convolution(xs, ks, None, list(dilation), list(padding), list(stride), False, [0] * nd, groups)
    crop = out[(slice(None), slice(None), *(slice(0, k) for k in kernel))]
    return crop.transpose(0, 1)  # (G·Co, Ci, *kernel)


def _like_weight(gw, weight):
    """gw laid out as ATen's `convolution_backward` returns it: in the weight's memory format. A
    transposed view escaped to the ops after it, and an eager op there may assume the layout
    (`_weight_norm_interface_backward`'s CPU kernel read a transposed gradient as contiguous:
    HuBERT's and wav2vec 2.0's weight-normed grouped positional convolution trained on wrong
    gradients)."""
    return gw.contiguous(memory_format=suggest_memory_format(weight))


def _output_padding(in_sizes, out_sizes, kernel, stride, padding, dilation):
    return [i - ((o - 1) * s - 2 * p + d * (k - 1) + 1)
            for i, o, k, s, p, d in zip(in_sizes, out_sizes, kernel, stride, padding, dilation)]


def _convolution_backward(grad, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
                          groups, output_mask):
    if groups == 1 and not transposed:
        return NotImplemented  # torch-mlir's own lowering
    nd = weight.dim() - 2
    stride, padding, dilation = (list(v) * nd if len(v) == 1 else list(v) for v in (stride, padding, dilation))
    kernel = list(weight.shape[2:])
    gx = gw = gb = None
    if output_mask[0]:
        if transposed:
            gx = aten.convolution(grad, weight, None, stride, padding, dilation, False, [0] * nd, groups)
        else:
            pad_out = _output_padding(x.shape[2:], grad.shape[2:], kernel, stride, padding, dilation)
            gx = aten.convolution(grad, weight, None, stride, padding, dilation, True, pad_out, groups)
    if output_mask[1]:
        gw = _like_weight(_weight_grad(grad, x, kernel, stride, padding, dilation, groups) if transposed
                          else _weight_grad(x, grad, kernel, stride, padding, dilation, groups), weight)
    if output_mask[2]:
        gb = grad.sum([0, *range(2, grad.dim())])
    return gx, gw, gb


def _convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    depthwise_3d = not transposed and weight.dim() == 5 and weight.shape[1] == 1 and weight.shape[0] == groups > 1
    if depthwise_3d and groups % 2 == 0:
        # channel pairs: groups of 2 input and 2 output channels, each output's weight zero at the
        # other's channel (block diagonal): every output computed once, no slice after
        own = torch.arange(groups, device=weight.device).reshape(groups, 1, 1, 1, 1) % 2
        paired = torch.where(own == torch.arange(2, device=weight.device).reshape(1, 2, 1, 1, 1), weight, 0.0)
        return aten.convolution(x, paired, bias, stride, padding, dilation, False, output_padding, groups // 2)
    if groups > 1 and weight.shape[1] == 1 and transposed:
        wide = torch.cat([weight, torch.zeros_like(weight)], 1)
    elif depthwise_3d:  # output channel 2c is channel c, 2c + 1 a zero one: (C, 1, k) -> (2C, 1, k)
        wide = torch.stack([weight, torch.zeros_like(weight)], 1).flatten(0, 1)
    else:
        return NotImplemented
    out = aten.convolution(x, wide, None, stride, padding, dilation, transposed, output_padding, groups)[:, ::2]
    return out if bias is None else out + bias.reshape(-1, *[1] * (out.dim() - 2))


TABLE = {aten.convolution_backward.default: _convolution_backward, aten.convolution.default: _convolution}
