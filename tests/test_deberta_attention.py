"""transformers' DeBERTa-v2 (and v3's settings: relative attention, log buckets, p2c and c2p) in
default settings: its disentangled scores gather the content-to-position and position-to-content
products at each query-key pair's relative position, over (batch x heads) flattened. The gather's
flattened row index is an `affine.apply` in the score chain's body, which the flash kernel's
emitter did not translate: both attentions ran eagerly (42 ops, 26 kernels). Now each layer's
softmax is one flash kernel reading the gathered products. Against eager on fresh inputs, with
padding."""
import pytest
import torch

import uniorch
from uniorch import config

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")


def _model(dtype):
    torch.manual_seed(0)
    config = transformers.DebertaV2Config(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, relative_attention=True, position_buckets=8, max_relative_positions=16,
        pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", share_att_key=True)
    return transformers.DebertaV2Model(config).eval().to(dtype)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_deberta_v2_disentangled_attention_is_flash(dtype, tol):
    if dtype == torch.bfloat16 and not config.flag("UNIORCH_SLOW_TESTS"):
        pytest.skip("UNIORCH_SLOW_TESTS=1 runs bf16 too (the suite's time)")
    model = _model(dtype)
    cm = uniorch.compile(model, target="interpret")
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    ids = torch.randint(0, 96, (2, 9))
    rep = cm.explain(ids, attention_mask=mask)
    assert not rep.fallbacks, str(rep)
    attention = [k for k in rep.kernels if k.kind == "attention"]
    assert len(attention) == 2, str(rep)
    assert all(any(op == "aten.gather.default" for op, _ in k.ops) for k in attention), str(rep)
    assert all(k.kind == "attention" for k in rep.kernels if any("softmax" in op for op, _ in k.ops)), str(rep)
    for _ in range(2):
        ids = torch.randint(0, 96, (2, 9))
        got = cm(ids, attention_mask=mask).last_hidden_state.float()
        with torch.no_grad():
            want = model(ids, attention_mask=mask).last_hidden_state.float()
        assert ((got - want).abs().max() / want.abs().max()).item() <= tol
