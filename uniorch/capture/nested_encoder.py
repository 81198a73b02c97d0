"""`nn.TransformerEncoder` given a padding mask in inference: padded positions as eager's, zero.

Why: in eval mode without autograd, eager's encoder packs the unpadded tokens into a nested tensor
(its "sparsity fast path") and unpacks the result with zeros where the mask pads, before the final
norm. A trace never takes that path (export counts as torch.compile, and a nested tensor is not a
graph value): it computes every position, and the padded rows came out as whatever the layers made
of them (values up to 3 on a 2-layer encoder). Mean pooling over all positions, or anything else
reading them, then differed from eager, with no error.

While capture traces, the encoder's forward is wrapped: when eager would take the path (the same
conditions, read from the call being compiled), the padded rows are set to what eager gives
them: zero, or the final norm of a zero row. Whether the mask is left-aligned (eager's check, data
dependent) is computed in the graph. The grad mode decides the path, so it is part of such a
model's guard (`module_modes.py`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_DEVICES = ("cpu", "cuda", "xpu")


def may_nest(model: nn.Module) -> bool:
    """Whether `model` holds an encoder that eager may run on nested tensors."""
    return any(isinstance(m, nn.TransformerEncoder) and getattr(m, "use_nested_tensor", False)
               for m in model.modules())


def _takes_fast_path(enc: nn.TransformerEncoder, src, mask, padding, grad_enabled: bool) -> bool:
    """eager's conditions for the nested path (TransformerEncoder.forward), but for its left
    alignment check, which depends on the mask's values."""
    first = enc.layers[0]
    if not (torch.backends.mha.get_fastpath_enabled() and getattr(enc, "use_nested_tensor", False)):
        return False
    if first.training or src.dim() != 3 or padding is None or src.is_nested or mask is not None:
        return False
    if torch.is_autocast_enabled() or src.device.type not in _DEVICES:
        return False
    attn = first.self_attn
    weights = (attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight, attn.out_proj.bias,
               first.norm1.weight, first.norm1.bias, first.norm2.weight, first.norm2.bias,
               first.linear1.weight, first.linear1.bias, first.linear2.weight, first.linear2.bias)
    return not (grad_enabled and (src.requires_grad or any(w is not None and w.requires_grad for w in weights)))


class NestedEncoderAsEager:
    """Active while capture traces: an encoder eager would run nested gives eager's padded rows.
    `grad_enabled`: the grad mode of the call being compiled (export may trace under another)."""

    def __init__(self, grad_enabled: bool):
        self.grad_enabled = grad_enabled
        self._original = None

    def __enter__(self):
        original, grad_enabled = nn.TransformerEncoder.forward, self.grad_enabled
        self._original = original

        def forward(enc, src, mask=None, src_key_padding_mask=None, is_causal=None):
            if not _takes_fast_path(enc, src, mask, src_key_padding_mask, grad_enabled):
                return original(enc, src, mask, src_key_padding_mask, is_causal)
            padding = F._canonical_mask(mask=src_key_padding_mask, mask_name="src_key_padding_mask",
                                        other_type=None, other_name="mask", target_type=src.dtype)
            padded = padding != 0
            # nested from the mask: each sequence is its first `length` tokens
            length = padded.logical_not().sum(1, keepdim=True)
            beyond = torch.arange(src.size(1), device=src.device).unsqueeze(0) >= length
            if getattr(enc, "mask_check", True):  # not left-aligned: eager takes the padded path
                zero = beyond & (beyond == padded).all()
                out = original(enc, src, None, src_key_padding_mask, is_causal)
            else:  # unchecked: the first `length` tokens, whatever the mask said
                zero = beyond
                out = original(enc, src, None, beyond, is_causal)
            zero_row = torch.zeros_like(src[:1, :1])
            fill = enc.norm(zero_row) if enc.norm is not None else zero_row
            return torch.where(zero.unsqueeze(-1), fill, out)

        nn.TransformerEncoder.forward = forward
        return self

    def __exit__(self, *exc):
        nn.TransformerEncoder.forward = self._original
        return False
