"""nn.Transformer, nn.TransformerEncoder and nn.TransformerDecoder given attention masks: compiled
whole, the mask applied as given (capture/causal_mask.py), against eager on fresh inputs."""
import copy

import pytest
import torch
from torch import nn
from torch.nn.modules import transformer as torch_transformer

import uniorch
from uniorch.capture.causal_mask import _as_given


def _masks(t: int, kind: str, gen) -> torch.Tensor:
    if kind == "causal":
        return nn.Transformer.generate_square_subsequent_mask(t)
    if kind == "bool_causal":
        return torch.ones(t, t, dtype=torch.bool).triu(1)
    return torch.randn(t, t, generator=gen)  # additive, not causal: must be applied as it is


@pytest.mark.parametrize("kind", ["causal", "bool_causal", "additive"])
def test_seq2seq_transformer_with_masks_compiles_whole(kind):
    gen = torch.Generator().manual_seed(3)
    torch.manual_seed(3)
    model = nn.Transformer(16, 4, 1, 1, 32, dropout=0.0, batch_first=True).eval()
    src, tgt = torch.randn(2, 7, 16, generator=gen), torch.randn(2, 5, 16, generator=gen)
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[1, 5:] = True
    kwargs = {"tgt_mask": _masks(5, kind, gen), "src_key_padding_mask": pad, "memory_key_padding_mask": pad}
    cm = uniorch.compile(model, target="interpret")
    with torch.no_grad():
        torch.testing.assert_close(cm(src, tgt, **kwargs), model(src, tgt, **kwargs), rtol=1e-4, atol=1e-5)
        rep = cm.explain(src, tgt, **kwargs)
    assert rep.kernels and not rep.fallbacks and not rep.capture_note, str(rep)
    assert torch_transformer._detect_is_causal_mask is not _as_given  # PyTorch's again after the capture


def test_encoder_with_a_causal_source_mask_trains_compiled_like_eager():
    torch.manual_seed(4)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    ref = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    x, mask = torch.randn(2, 6, 16), nn.Transformer.generate_square_subsequent_mask(6)
    cm(x, mask=mask).square().mean().backward()
    ref(x, mask=mask).square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")
    rep = cm.explain(x, mask=mask)
    # Dynamo broke the graph at the mask's comparison and compiled nothing before
    assert not rep.graph_breaks and not rep.fallbacks and rep.backward.kernels, str(rep)
