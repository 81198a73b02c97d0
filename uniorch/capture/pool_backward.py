"""Gradients of average and adaptive pooling as ATen ops that lower.

Neither has a decomposition in PyTorch or a linalg lowering in torch-mlir, so a training graph with
an average pool lost its whole backward region to PyTorch. Average pooling is linear: the input's
gradient scatters each output gradient, divided by its window's divisor, over the window. That is a
transposed convolution of `grad / divisor` with a kernel of ones (one channel per plane), whose full
result is cropped by the padding: windows that ceil_mode adds past the input's end fall outside.
Adaptive pooling's backward ops have no lowering either: average as matmuls with each dim's window
matrix, max as a scatter-add at the forward's indices.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

aten = torch.ops.aten


def _divisors(out_sizes, in_sizes, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override,
              dtype, device):
    """Each output position's divisor, as avg_pool computes it, broadcast over the spatial dims."""
    if divisor_override:
        return torch.full((), float(divisor_override), dtype=dtype, device=device)
    total = None
    nd = len(out_sizes)
    for d, (o, n, k, s, p) in enumerate(zip(out_sizes, in_sizes, kernel, stride, padding)):
        start = torch.arange(o, device=device) * s - p
        end = torch.clamp(start + k, max=n + p)
        size = end - start  # the window within the padded input
        if not count_include_pad:
            size = torch.clamp(end, max=n) - torch.clamp(start, min=0)
        shape = [1] * nd
        shape[d] = o
        size = size.to(dtype).reshape(shape)
        total = size if total is None else total * size
    return total


def _avg_pool_backward(grad, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override, nd):
    kernel = list(kernel) * (nd if len(kernel) == 1 else 1)
    stride = list(stride or kernel) * (nd if len(stride or kernel) == 1 else 1)
    padding = list(padding) * (nd if len(padding) == 1 else 1)
    spatial_in, spatial_out = list(x.shape[-nd:]), list(grad.shape[-nd:])
    lead = list(x.shape[:-nd])
    g = grad / _divisors(spatial_out, spatial_in, kernel, stride, padding, ceil_mode, count_include_pad,
                         divisor_override, grad.dtype, grad.device)
    planes = g.reshape([-1, 1] + spatial_out)
    ones = torch.ones([1, 1] + kernel, dtype=grad.dtype, device=grad.device)
    full = (F.conv_transpose2d if nd == 2 else F.conv_transpose3d)(planes, ones, stride=stride)
    # full covers [-padding, (out-1)*stride + kernel - padding) of the input's coordinates
    pads = []
    for d in reversed(range(nd)):
        have = full.shape[2 + d]
        hi = spatial_in[d] + padding[d]
        pads += [0, max(0, hi - have)]
    if any(pads):
        full = F.pad(full, pads)
    index = [slice(None), slice(None)] + [slice(padding[d], padding[d] + spatial_in[d]) for d in range(nd)]
    return full[tuple(index)].reshape(lead + spatial_in)


def _avg_pool2d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 2)


def _avg_pool3d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    return _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, 3)


def _windows(n_in: int, n_out: int, dtype, device):
    """Adaptive pooling's windows along one dim as a (n_out, n_in) 0/1 matrix: output i covers
    [floor(i n_in / n_out), ceil((i + 1) n_in / n_out))."""
    i = torch.arange(n_out, device=device)
    start = (i * n_in) // n_out
    end = ((i + 1) * n_in + n_out - 1) // n_out
    h = torch.arange(n_in, device=device)
    return ((h[None, :] >= start[:, None]) & (h[None, :] < end[:, None])).to(dtype)


def _adaptive_avg_pool_backward(grad, x, nd):
    """Separable: along each spatial dim the gradient is spread over the window by its membership
    matrix, divided by the window's size (windows may overlap, so no plain pooling inverse)."""
    g = grad
    for d in range(nd):
        dim = g.dim() - nd + d
        win = _windows(x.shape[dim], grad.shape[dim], torch.float32 if grad.dtype in (torch.float16, torch.bfloat16)
                       else grad.dtype, grad.device)
        win = win / win.sum(1, keepdim=True)
        g = torch.matmul(g.movedim(dim, -1).to(win.dtype), win).movedim(-1, dim)
    return g.to(grad.dtype)


def _adaptive_max_pool_backward(grad, x, indices, nd):
    """Each output's gradient lands on the input element its index names (flat within its plane);
    windows may overlap, so the landings are summed."""
    lead = list(x.shape[:-nd])
    planes = grad.reshape(-1, grad[(0,) * len(lead)].numel() if lead else grad.numel())
    flat = indices.reshape(planes.shape)
    size = 1
    for n in x.shape[-nd:]:
        size *= n
    out = torch.zeros(planes.shape[0], size, dtype=grad.dtype, device=grad.device).scatter_add(1, flat, planes)
    return out.reshape(x.shape)


TABLE = {
    aten.avg_pool2d_backward.default: _avg_pool2d_backward,
    aten.avg_pool3d_backward.default: _avg_pool3d_backward,
    aten._adaptive_avg_pool2d_backward.default: lambda grad, x: _adaptive_avg_pool_backward(grad, x, 2),
    aten._adaptive_avg_pool3d_backward.default: lambda grad, x: _adaptive_avg_pool_backward(grad, x, 3),
    aten.adaptive_max_pool2d_backward.default: lambda grad, x, idx: _adaptive_max_pool_backward(grad, x, idx, 2),
    aten.adaptive_max_pool3d_backward.default: lambda grad, x, idx: _adaptive_max_pool_backward(grad, x, idx, 3),
    # fractional max pooling's indices are flat within a plane too (its windows are pseudo-random)
    aten.fractional_max_pool2d_backward.default:
        lambda grad, x, kernel, out, idx: _adaptive_max_pool_backward(grad, x, idx, 2),
    aten.fractional_max_pool3d_backward.default:
        lambda grad, x, kernel, out, idx: _adaptive_max_pool_backward(grad, x, idx, 3),
}
