"""Contraction kernels: convolutions on a GPU read their channels innermost.

An implicit-GEMM convolution reduces over K = channels x window. Read from NCHW tensors, the tile
of K holds elements a whole image apart (the channel stride), and the positions along the other
axis are an output row's pixels, found by dividing a flat index by the row width: the compiler
can prove no two neighbouring elements adjacent, so every element is a scalar load (2 bytes for
bf16), and H200 run 3 measured each of resnet_stack's 3x3 convolutions at 0.24 ms, 31 TFLOP/s,
where cuDNN's whole forward took 0.42 ms. As cuDNN and CUTLASS do, the kernel then reads NHWC:
K is enumerated window-major with the channel innermost, and the launch plan lays the input and
the filters out with the channels innermost (KernelSource.relayout: the same values, other
strides), so a K tile is a run of consecutive channels at one window position: 16-byte loads.

Only where the dot runs on tensor cores (16-bit operands, or TF32 where PyTorch's float32 matmul
precision allows it), on cuda and rocm, and where the channel count is a multiple of 16 (the stem
convolution's 3 channels stay as they are). Exact float32 dots (FMA units) keep their layout:
their shared-memory reads favour the other order (codegen/fma_relayout.py).
"""
from __future__ import annotations

from . import patterns as _pat
from .contraction_ir import Lin, _dim_pos
from .fma_relayout import KEEP, SKIP, last_dim_orders

MIN_CHANNELS = 16
MAX_WINDOW = 16  # largest filter extent taken for a window dim (7x7 stems, 11x11 AlexNet-like)


def channels_innermost(plan, target: str) -> None:
    """Reorders `plan.order["k"]` window-major, the channel dim innermost, and records that dim
    as `plan.channels_last`, for a convolution that qualifies (see the module's doc)."""
    from .contraction_emit import _vendor
    from .contraction_schedule import _target_kind

    if _target_kind(target)[0] == "interpret" or _vendor(target) not in ("cuda", "rocm"):
        return
    if not _pat.is_convolution(plan.gen) or not _tensor_cores(plan):
        return
    ks = list(plan.order["k"])
    plain = [d for d in ks if all(any(_dim_pos(e) == d for e in m.results) for m in plan.maps[:2])]
    if len(plain) != 1 or not isinstance(plan.sizes[plain[0]], int) or plan.sizes[plain[0]] % MIN_CHANNELS:
        return
    # the rest of K is the window: small. A weight gradient sums over the batch and the output
    # pixels instead (the batch plain in both factors), and keeps its layout
    if any(not isinstance(plan.sizes[d], int) or plan.sizes[d] > MAX_WINDOW for d in ks if d != plain[0]):
        return
    plan.order["k"] = [d for d in ks if d != plain[0]] + plain
    plan.channels_last = plain[0]


def fma_channels_innermost(plan, target: str) -> None:
    """The same for a weight gradient on FMA units (exact fp32): its N is input channels x window
    and its K the pixels, and the input it reads for B (the im2col of x) is contiguous along K, the
    order FMA dots read across (codegen/fma_relayout.py). With x channels-last and N enumerated
    window-major, channel innermost, a B tile is a run of consecutive channels at each pixel. H200
    run 5: resnet_stack_train's six 3x3 weight gradients took 2.1 ms each (3.5 TFLOP/s), 12.7 of
    its 19 ms on the device, where the forward convolutions of the same size took 0.42."""
    from .contraction_emit import _vendor
    from .contraction_schedule import _target_kind

    if _target_kind(target)[0] == "interpret" or _vendor(target) not in ("cuda", "rocm"):
        return
    if plan.channels_last is not None or not _pat.is_convolution(plan.gen) or not _pat.exact_fp32(plan.func, plan.dot_types):
        return
    ns = list(plan.order["n"])
    dims_of = [_pat.map_dims(m) for m in plan.maps[:2]]
    # the channel: an N dim one factor reads plainly and the other not at all
    plain = [d for d in ns for i in (0, 1)
             if d not in dims_of[1 - i] and any(_dim_pos(e) == d for e in plan.maps[i].results)]
    if len(plain) != 1 or not isinstance(plan.sizes[plain[0]], int) or plan.sizes[plain[0]] % MIN_CHANNELS:
        return
    window = [d for d in ns if d != plain[0]]
    if not window or any(not isinstance(plan.sizes[d], int) or plan.sizes[d] > MAX_WINDOW for d in window):
        return
    # a forward convolution has the same shape with the roles swapped (N = batch x output pixels,
    # each pixel summed with a filter tap of K): a weight gradient's window dim is the smaller of
    # each pair summed in one index (a 3-tap window beside 56 pixels)
    ks = set(plan.order["k"])
    for d in window:
        pairs = [_pat.expr_dims(e) - {d} for m in plan.maps[:2] for e in m.results if d in _pat.expr_dims(e)]
        partners = [e for p in pairs for e in p if e in ks]
        if not partners or any(not isinstance(plan.sizes[e], int) or plan.sizes[e] <= plan.sizes[d] for e in partners):
            return
    plan.order["n"] = window + plain
    plan.channels_last = plain[0]


def laid_out(plan, target: str):
    """`plan` with the layout decisions codegen makes for `target` (which the schedule's tiles
    depend on too): a convolution read channels innermost, along K or along N."""
    channels_innermost(plan, target)
    fma_channels_innermost(plan, target)
    return plan


def _tensor_cores(plan) -> bool:
    if all(t in ("bf16", "f16") for t in plan.dot_types):
        return True
    return all(t == "f32" for t in plan.dot_types) and "tf32" in _pat.dot_precision(plan.func, "f32")


def channels_last_relayout(emitter) -> list:
    """[(input index, dim order)] for the factors a channels-innermost convolution reads whose
    channel dim is not innermost: that dim moved last (NCHW -> NHWC, filters FCHW -> FHWC)."""
    c = emitter.p.channels_last
    if c is None:
        return []

    def channel_last(i, idx):
        js = [j for j, lin in enumerate(idx) if lin == Lin.dim(c)]
        if len(idx) < 2 or not js:
            return SKIP  # a per-channel vector (bias, BatchNorm's statistics): nothing to reorder
        return js[0] if len(js) == 1 else KEEP

    return last_dim_orders(list(emitter.a_loads) + list(emitter.b_loads), channel_last)


__all__ = ["channels_innermost", "fma_channels_innermost", "laid_out", "channels_last_relayout", "MIN_CHANNELS"]
