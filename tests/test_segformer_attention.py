"""SegFormer's efficient self-attention is one flash kernel per stage: its keys and values are the
pixels of a strided convolution (the spatial reduction), viewed as one dim of T/r² keys.
passes/sink_collapse.py sank that view into q·kᵀ and split the keys back into (rows, columns), so
the softmax ran over two dims and q·kᵀ, the softmax and P·v were six kernels writing the scores; a
dim only the second factor reads now stays whole. transformers' SegformerModel at a tiny config,
against eager on fresh inputs."""
import pytest
import torch

from test_swin_attention import assert_two_flash_stages_match_eager

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_segformer_attention_is_one_flash_kernel_per_stage(dtype, tol):
    torch.manual_seed(0)
    config = transformers.SegformerConfig(hidden_sizes=[8, 16], depths=[1, 1], num_encoder_blocks=2,
                                          num_attention_heads=[1, 2], sr_ratios=[2, 1], patch_sizes=[7, 3],
                                          strides=[4, 2], decoder_hidden_size=16, mlp_ratios=[2, 2])
    assert_two_flash_stages_match_eager(transformers.SegformerModel(config).eval().to(dtype), dtype, tol)
