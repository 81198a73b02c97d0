"""SegFormer's efficient self-attention is one flash kernel per stage: its keys and values are the
pixels of a strided convolution (the spatial reduction), viewed as one dim of T/r² keys.
passes/sink_collapse.py sank that view into q·kᵀ and split the keys back into (rows, columns), so
the softmax ran over two dims and q·kᵀ, the softmax and P·v were six kernels writing the scores; a
dim only the second factor reads now stays whole. transformers' SegformerModel at a tiny config,
against eager on fresh inputs."""
import pytest
import torch

import uniorch

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_segformer_attention_is_one_flash_kernel_per_stage(dtype, tol):
    torch.manual_seed(0)
    config = transformers.SegformerConfig(hidden_sizes=[8, 16], depths=[1, 1], num_encoder_blocks=2,
                                          num_attention_heads=[1, 2], sr_ratios=[2, 1], patch_sizes=[7, 3],
                                          strides=[4, 2], decoder_hidden_size=16, mlp_ratios=[2, 2])
    model = transformers.SegformerModel(config).eval().to(dtype)
    cm = uniorch.compile(model, target="interpret")
    x = torch.randn(2, 3, 32, 32, dtype=dtype)
    rep = cm.explain(x)
    assert not rep.fallbacks, str(rep)
    assert [k.kind for k in rep.kernels].count("attention") == 2, str(rep)
    softmax = [k for k in rep.kernels if any("softmax" in op for op, _ in k.ops)]
    assert softmax and all(k.kind == "attention" for k in softmax), str(rep)
    for _ in range(2):
        x = torch.randn(2, 3, 32, 32, dtype=dtype)
        got = cm(x).last_hidden_state
        with torch.no_grad():
            want = model(x).last_hidden_state
        err = ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()
        assert err <= tol, err
