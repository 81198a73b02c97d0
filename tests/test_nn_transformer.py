"""torch.nn's own transformer modules, as a classifier or a seq2seq model uses them: encoders with a
padding mask (eager's nested fast path in inference), decoders with a causal mask, attention with
its weights. Against eager on fresh random inputs."""
import pytest
import torch
from torch import nn

import uniorch


def _encoder(seed: int, **kw) -> nn.TransformerEncoder:
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, **kw).eval()


def _padding(rows: list[int], length: int = 7) -> torch.Tensor:
    """True where padded: row i keeps its first rows[i] tokens."""
    return torch.arange(length)[None, :] >= torch.tensor(rows)[:, None]


@pytest.mark.parametrize("norm", [False, True])
def test_encoder_with_a_padding_mask_pads_as_eager(norm):
    """eager packs the tokens into a nested tensor and unpacks with zeros at the padding (then the
    final norm); the trace computed every position, and padded rows came out nonzero."""
    enc = _encoder(0, norm=nn.LayerNorm(32) if norm else None)
    cm = uniorch.compile(enc, target="interpret")
    for rows in ([5, 3, 7], [2, 7, 6]):
        x, mask = torch.randn(3, 7, 32), _padding(rows)
        with torch.no_grad():
            want, got = enc(x, src_key_padding_mask=mask), cm(x, src_key_padding_mask=mask)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        # pooled over every position, as a classifier without the mask would
        torch.testing.assert_close(got.mean(1), want.mean(1), rtol=1e-4, atol=1e-5)
    assert cm.cache_size == 1 and not cm.explain().fallbacks


def test_encoder_padding_follows_the_grad_mode_and_the_mask():
    """With autograd on, or a mask not left-aligned, eager takes the padded path: the padded rows
    are computed. The grad mode is part of the guard; the alignment is computed in the graph."""
    enc = _encoder(1, norm=nn.LayerNorm(32))
    cm = uniorch.compile(enc, target="interpret")
    x = torch.randn(3, 7, 32)
    cases = [(False, _padding([5, 3, 7])), (True, _padding([5, 3, 7])), (False, _padding([5, 3, 7]))]
    gaps = torch.zeros(3, 7, dtype=torch.bool)
    gaps[0, 1] = gaps[2, 6] = True  # a gap inside row 0: not left-aligned
    cases.append((False, gaps))
    for grad, mask in cases:
        with torch.set_grad_enabled(grad):
            want, got = enc(x, src_key_padding_mask=mask), cm(x, src_key_padding_mask=mask)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert cm.cache_size == 2, cm.recompiles
    assert "grad mode changed (off -> on)" in cm.recompiles[0]
    # a float mask (-inf where padded), as F._canonical_mask makes it
    fmask = torch.zeros(3, 7).masked_fill(_padding([4, 7, 2]), float("-inf"))
    with torch.no_grad():
        torch.testing.assert_close(cm(x, src_key_padding_mask=fmask), enc(x, src_key_padding_mask=fmask),
                                   rtol=1e-4, atol=1e-5)


def test_encoder_without_its_mask_check_takes_each_rows_first_tokens():
    enc = _encoder(2, mask_check=False)
    mask = _padding([6, 3, 7])
    mask[0, 2] = True  # unchecked: eager keeps row 0's first 5 tokens, whatever the mask says
    x = torch.randn(3, 7, 32)
    with torch.no_grad():
        torch.testing.assert_close(uniorch.compile(enc, target="interpret")(x, src_key_padding_mask=mask),
                                   enc(x, src_key_padding_mask=mask), rtol=1e-4, atol=1e-5)


def test_decoder_and_attention_weights_match_eager():
    torch.manual_seed(3)
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, batch_first=True), 2).eval()
    mha = nn.MultiheadAttention(32, 4, batch_first=True).eval()
    tgt, memory, pad = torch.randn(3, 5, 32), torch.randn(3, 7, 32), _padding([5, 3, 7])
    causal = nn.Transformer.generate_square_subsequent_mask(5)
    with torch.no_grad():
        want = dec(tgt, memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=pad)
        got = uniorch.compile(dec, target="interpret")(tgt, memory, tgt_mask=causal, tgt_is_causal=True,
                                                        memory_key_padding_mask=pad)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        want = mha(memory, memory, memory, key_padding_mask=pad)
        got = uniorch.compile(mha, target="interpret")(memory, memory, memory, key_padding_mask=pad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
