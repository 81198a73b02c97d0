"""Shape and layout ops torch-mlir cannot lower, rewritten at capture into ops that compile.

* `roll`, `fft_fftshift`, `fft_ifftshift`: torch-mlir lowers `roll` into a `tensor.cast` no kernel
  covers ("cannot run 'tensor.cast' in a launch plan"), and has no fftshift at all; a roll by s
  along a dim of size n is the cat of its last s and its first n - s slices, which compiles.
* `empty_permuted`: torch-mlir has no lowering (and a strided `empty_strided` fails too); the
  values are uninitialized either way, so it is a plain `empty` of the logical sizes, contiguous.
* `_batch_norm_with_update_functional` (train-mode `batch_norm` as export records it): PyTorch's
  own decomposition, whose cudnn "reserve" result is an empty allocation.
* `torch_nn._linear_cross_entropy_batch_chunked(_no_reduction)` (F.linear_cross_entropy with
  chunking options): the chunks only bound eager's memory; the loss is linear then cross entropy.
* `grid_sampler_3d`: trilinear and nearest sampling as gathers, the 3-d form of PyTorch's
  `grid_sampler_2d` decomposition, with ATen's CPU kernel's coordinate rules.
* `_upsample_bilinear2d_aa`: ATen's antialiased separable filter, whose weights depend only on
  shapes and scales, as two weight matrices built from iotas and applied as contractions.
"""
from __future__ import annotations

import math

import torch

aten = torch.ops.aten


# ---- roll and fftshift --------------------------------------------------------------------------

def _roll_dim(x, shift: int, d: int):
    n = x.shape[d]
    s = shift % n if n else 0
    if s == 0:
        return x
    return torch.cat([x.narrow(d, n - s, s), x.narrow(d, 0, n - s)], d)


def _roll(x, shifts, dims=()):
    """`roll` as ATen defines it: per (shift, dim) pair, or over the flattened tensor when no dim
    is given. Complex and zero-element tensors keep the op (nothing to move, or no lowering)."""
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if x.is_complex() or x.numel() == 0 or not shifts:
        return NotImplemented
    if not dims:
        if len(shifts) != 1:
            return NotImplemented  # ATen raises
        return _roll_dim(x.reshape(-1), shifts[0], 0).reshape(x.shape).clone()
    if len(dims) != len(shifts) or x.dim() == 0:
        return NotImplemented
    out = x
    for s, d in zip(shifts, dims):
        out = _roll_dim(out, s, d % x.dim())
    return out.clone() if out is x else out


def _shift(half_up: bool):
    """fftshift moves element n // 2 to the front, ifftshift undoes it: a roll by n // 2, or by
    (n + 1) // 2 (torch/_refs/fft.py)."""

    def decomposed(x, dim=None):
        dims = list(range(x.dim())) if dim is None else [dim] if isinstance(dim, int) else list(dim)
        shifts = [(x.shape[d] + 1) // 2 if half_up else x.shape[d] // 2 for d in dims]
        if x.dim() == 0 or not dims:
            return NotImplemented if x.is_complex() else x.clone()
        return _roll(x, shifts, dims)

    return decomposed


# ---- allocations and batch norm -----------------------------------------------------------------

def _empty_permuted(size, physical_layout, dtype=None, layout=None, device=None, pin_memory=None):
    """Uninitialized memory with the logical sizes. Eager's strides follow `physical_layout`;
    here the result is contiguous (a strided `empty_strided` does not lower), which no value of
    a program can observe."""
    if layout not in (None, torch.strided):
        return NotImplemented
    return torch.empty(list(size), dtype=dtype, device=device)


def _batch_norm_with_update_functional(x, weight, bias, running_mean, running_var, momentum, eps):
    """PyTorch's decomposition (native_batch_norm_helper in training mode plus the updated
    running statistics); torch-mlir cannot import the op's six results."""
    if x.numel() == 0:
        return NotImplemented  # ATen raises for an empty batch
    from torch._decomp.decompositions import _batch_norm_with_update_functional as torch_decomposition

    return torch_decomposition(x, weight, bias, running_mean, running_var, momentum, eps)


# ---- linear cross entropy -----------------------------------------------------------------------

def _lce_rows(x, linear_weight, target, linear_bias, weight, ignore_index):
    """Per-row loss and weight, as the chunked kernel computes them: logits = x W^T + b, loss =
    logsumexp(logits) - logits[target] (max-shifted), weight = class weight of the target (1
    without) and 0 on ignored rows, whose target reads class 0 when ignore_index is out of range."""
    num_classes = linear_weight.shape[0]
    logits = torch.mm(x, linear_weight.t())
    if linear_bias is not None:
        logits = logits + linear_bias
    shifted = logits - torch.amax(logits, 1, keepdim=True)
    ignored = target == ignore_index
    if ignore_index < 0 or ignore_index >= num_classes:
        target = torch.where(ignored, 0, target)
    picked = torch.gather(shifted, 1, target.unsqueeze(1)).squeeze(1)
    loss = torch.log(torch.sum(torch.exp(shifted), 1)) - picked
    if weight is None:
        w = (~ignored).to(x.dtype)
    else:
        w = torch.where(ignored, 0, torch.index_select(weight, 0, target).to(x.dtype))
    return loss, w


def _lce_supported(x, linear_weight, target, weight, acc_dtype) -> bool:
    """Inputs computed in their own dtype (fp32/fp64): 16-bit inputs mix fp16 logits and fp32
    accumulation by policy, which is not reproduced here."""
    return (x.dim() == 2 and x.dtype in (torch.float32, torch.float64) and acc_dtype == x.dtype
            and linear_weight.dtype == x.dtype and target.dtype == torch.int64
            and (weight is None or weight.dtype == x.dtype))


def _linear_cross_entropy_chunked(x, linear_weight, target, linear_bias, weight, reduction, ignore_index,
                                  label_smoothing, batch_chunk_size, acc_policy, acc_dtype, allow_retain_graph,
                                  compute_input_grad, compute_linear_weight_grad, compute_linear_bias_grad):
    """The scalar-reduction op: (loss, and the gradients it precomputes for its backward, empty
    when not requested). Mean divides by the summed row weights, NaN when they sum to 0."""
    if (not _lce_supported(x, linear_weight, target, weight, acc_dtype) or label_smoothing > 0
            or reduction not in ("mean", "sum")
            or compute_input_grad or compute_linear_weight_grad or compute_linear_bias_grad):
        return NotImplemented
    loss, w = _lce_rows(x, linear_weight, target, linear_bias, weight, ignore_index)
    total = torch.sum(loss * w)
    if reduction == "mean":
        d = torch.sum(w)
        total = torch.where(d == 0, math.nan, total / d)
    empty = dict(dtype=x.dtype, device=x.device)
    return (total, torch.empty((0, 0), **empty), torch.empty((0, 0), **empty), torch.empty((0,), **empty))


def _linear_cross_entropy_chunked_none(x, linear_weight, target, linear_bias, weight, ignore_index,
                                       batch_chunk_size, acc_policy, acc_dtype):
    """reduction='none': each row's loss times its weight (0 on ignored rows)."""
    if not _lce_supported(x, linear_weight, target, weight, acc_dtype):
        return NotImplemented
    loss, w = _lce_rows(x, linear_weight, target, linear_bias, weight, ignore_index)
    return loss * w


# ---- grid_sampler_3d ---------------------------------------------------------------------------

def _unnormalize(coord, size: int, align_corners: bool):
    """ATen's grid_sampler_unnormalize: [-1, 1] to pixel centers (align_corners) or edges."""
    if align_corners:
        return ((coord + 1) / 2) * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _reflect(coord, twice_low: int, twice_high: int):
    """ATen's reflect_coordinates: mirror into [low, high] as often as it takes."""
    if twice_low == twice_high:
        return torch.zeros_like(coord)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    dist = torch.abs(coord - low)
    # fmod by a tensor: torch-mlir cannot lower fmod.Scalar
    extra = torch.fmod(dist, torch.full_like(dist, span))
    flips = torch.floor(dist / span)
    even = torch.fmod(flips, torch.full_like(flips, 2)) == 0
    return torch.where(even, extra + low, span - extra + low)


def _source_index(coord, size: int, padding_mode: int, align_corners: bool):
    """ATen's grid_sampler_compute_source_index (CPU): zeros keeps the coordinate, border clips
    it, reflection mirrors then clips."""
    coord = _unnormalize(coord, size, align_corners)
    if padding_mode == 2:
        coord = _reflect(coord, 0, 2 * (size - 1)) if align_corners else _reflect(coord, -1, 2 * size - 1)
    if padding_mode in (1, 2):
        coord = torch.clamp(coord, 0, size - 1)
    return coord


def _grid_sampler_3d(x, grid, interpolation_mode, padding_mode, align_corners):
    """Every output voxel gathers its (one or eight) neighbours from the flattened volume; a
    neighbour outside it contributes zero, and the trilinear weights and their summation order
    are those of ATen's CPU kernel (tnw, tne, tsw, tse, bnw, bne, bsw, bse)."""
    if (x.dtype not in (torch.float32, torch.float64) or grid.dtype != x.dtype or x.dim() != 5
            or interpolation_mode not in (0, 1) or padding_mode not in (0, 1, 2) or x.numel() == 0
            or grid.numel() == 0):
        return NotImplemented  # bicubic has no 3-d form (ATen raises); empty inputs stay eager
    n, c, depth, height, width = x.shape
    out_spatial = grid.shape[1:4]
    p = out_spatial[0] * out_spatial[1] * out_spatial[2]
    coords = grid.reshape(n, p, 3)
    ix = _source_index(coords[..., 0], width, padding_mode, align_corners)
    iy = _source_index(coords[..., 1], height, padding_mode, align_corners)
    iz = _source_index(coords[..., 2], depth, padding_mode, align_corners)
    flat = x.reshape(n, c, depth * height * width)

    def tap(fx, fy, fz, weight):
        """Input at integral float coordinates (zero outside the volume) times its weight."""
        inside = (fx >= 0) & (fx <= width - 1) & (fy >= 0) & (fy <= height - 1) & (fz >= 0) & (fz <= depth - 1)
        # integer before linearizing: float32 cannot count past 2**24 elements
        xi, yi, zi = (torch.where(inside, f, 0).to(torch.int64) for f in (fx, fy, fz))
        idx = (zi * height + yi) * width + xi
        vals = torch.gather(flat, 2, idx.unsqueeze(1).expand(n, c, p))
        if weight is None:
            return torch.where(inside.unsqueeze(1), vals, 0)
        return vals * torch.where(inside, weight, 0).unsqueeze(1)

    if interpolation_mode == 1:  # nearest: std::nearbyint rounds half to even, as torch.round
        out = tap(torch.round(ix), torch.round(iy), torch.round(iz), None)
    else:
        x0, y0, z0 = torch.floor(ix), torch.floor(iy), torch.floor(iz)
        x1, y1, z1 = x0 + 1, y0 + 1, z0 + 1
        corners = (
            (x0, y0, z0, (x1 - ix) * (y1 - iy) * (z1 - iz)),  # tnw
            (x1, y0, z0, (ix - x0) * (y1 - iy) * (z1 - iz)),  # tne
            (x0, y1, z0, (x1 - ix) * (iy - y0) * (z1 - iz)),  # tsw
            (x1, y1, z0, (ix - x0) * (iy - y0) * (z1 - iz)),  # tse
            (x0, y0, z1, (x1 - ix) * (y1 - iy) * (iz - z0)),  # bnw
            (x1, y0, z1, (ix - x0) * (y1 - iy) * (iz - z0)),  # bne
            (x0, y1, z1, (x1 - ix) * (iy - y0) * (iz - z0)),  # bsw
            (x1, y1, z1, (ix - x0) * (iy - y0) * (iz - z0)),  # bse
        )
        out = None
        for fx, fy, fz, w in corners:
            term = tap(fx, fy, fz, w)
            out = term if out is None else out + term
    return out.reshape(n, c, *out_spatial)


# ---- antialiased bilinear resize ----------------------------------------------------------------

def _as_float32(v: float) -> float:
    import struct

    return struct.unpack("f", struct.pack("f", v))[0]


def _area_scale(in_size: int, out_size: int, align_corners: bool, scale, dtype) -> float:
    """ATen's area_pixel_compute_scale, in the input's type (float for fp32 inputs)."""
    if align_corners:
        value = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    else:
        value = 1.0 / scale if scale is not None and scale > 0 else in_size / out_size
    return _as_float32(value) if dtype == torch.float32 else value


def _aa_weights(in_size: int, out_size: int, scale: float, dtype, device):
    """The [out, in] matrix of ATen's antialiased triangle filter (UpSampleKernel.cpp's
    _compute_indices_min_size_weights_aa): output i is centred at scale * (i + 0.5), reads
    inputs [xmin, xmin + xsize) with weights filter((j - center + 0.5) / max(scale, 1)),
    normalized to sum 1. Built from iotas: it depends on shapes alone."""
    support = scale if scale >= 1.0 else 1.0  # interp_size 2 times 0.5, widened when downscaling
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    max_taps = math.ceil(support) * 2 + 1
    i = torch.arange(out_size, dtype=dtype, device=device).unsqueeze(1)
    j = torch.arange(in_size, dtype=dtype, device=device).unsqueeze(0)
    center = scale * (i + 0.5)
    xmin = torch.clamp(torch.trunc(center - support + 0.5), min=0)
    xmax = torch.clamp(torch.trunc(center + support + 0.5), max=in_size)
    xmax = torch.minimum(xmax, xmin + max_taps)  # ATen clips xsize to max_interp_size
    w = torch.clamp(1 - torch.abs((j - center + 0.5) * invscale), min=0)
    w = torch.where((j >= xmin) & (j < xmax), w, 0)
    total = torch.sum(w, 1, keepdim=True)
    return torch.where(total != 0, w / torch.where(total != 0, total, 1), w)


def _upsample_bilinear2d_aa(x, output_size, align_corners, scales_h=None, scales_w=None):
    """ATen's separable pass order: the last dim first, then the height; a dim whose size does
    not change is not resampled at all (whatever the scale). Each pass is a contraction with
    the weight matrix."""
    if x.dtype not in (torch.float32, torch.float64) or x.dim() != 4 or x.numel() == 0:
        return NotImplemented  # 16-bit and uint8 use other weight formats
    out_h, out_w = output_size
    in_h, in_w = x.shape[2], x.shape[3]
    out = x
    if out_w != in_w:
        sw = _area_scale(in_w, out_w, align_corners, scales_w, x.dtype)
        out = torch.matmul(out, _aa_weights(in_w, out_w, sw, x.dtype, x.device).t())
    if out_h != in_h:
        sh = _area_scale(in_h, out_h, align_corners, scales_h, x.dtype)
        out = torch.matmul(_aa_weights(in_h, out_h, sh, x.dtype, x.device), out)
    return out.clone() if out is x else out


def _custom_op(name: str):
    """An op of the `torch_nn` library, which only exists once its module is imported (newer
    PyTorch releases); None otherwise."""
    try:
        import torch.nn.modules.linear_cross_entropy  # noqa: F401 - registers the ops
        return getattr(torch.ops.torch_nn, name).default
    except (ImportError, AttributeError, RuntimeError):
        return None


TABLE = {
    aten.roll.default: _roll,
    aten.fft_fftshift.default: _shift(False),
    aten.fft_ifftshift.default: _shift(True),
    aten.empty_permuted.default: _empty_permuted,
    aten._batch_norm_with_update_functional.default: _batch_norm_with_update_functional,
    aten.grid_sampler_3d.default: _grid_sampler_3d,
    aten._upsample_bilinear2d_aa.default: _upsample_bilinear2d_aa,
}
for _name, _fn in (("_linear_cross_entropy_batch_chunked", _linear_cross_entropy_chunked),
                   ("_linear_cross_entropy_batch_chunked_no_reduction", _linear_cross_entropy_chunked_none)):
    _op = _custom_op(_name)
    if _op is not None:
        TABLE[_op] = _fn
