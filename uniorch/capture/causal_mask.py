"""nn.Transformer's layers given an attention mask: traced with the mask as given.

Why: `nn.TransformerEncoder` and `nn.TransformerDecoder` ask `_detect_is_causal_mask` whether a
mask the caller passed without an `is_causal` hint is the causal one, by comparing its values
(`bool((mask == causal).all())`), so that attention can drop it for SDPA's causal flag. A trace
cannot branch on a value: export failed, Dynamo broke the graph there and compiled nothing, and
a model written as PyTorch's tutorials write it (`nn.Transformer(...)(src, tgt, tgt_mask=mask)`)
ran wholly in PyTorch, in inference and in training.

The answer only picks how attention applies the mask, not what it computes: a causal mask applied
as given is causal attention. So while capture traces (and while the training path's Dynamo call
runs), the detection answers with the caller's hint alone (`is_causal is True`), and the mask is
applied as given, which the fused attention kernel takes as an additive or boolean mask.
"""
from __future__ import annotations

import contextlib

from torch.nn.modules import transformer


def _as_given(mask, is_causal=None, size=None) -> bool:
    return is_causal is True


@contextlib.contextmanager
def as_given():
    """While the block runs: `_detect_is_causal_mask` reads no mask values."""
    original = getattr(transformer, "_detect_is_causal_mask", None)
    if original is None:  # a PyTorch without it: nothing to change
        yield
        return
    transformer._detect_is_causal_mask = _as_given
    try:
        yield
    finally:
        transformer._detect_is_causal_mask = original
