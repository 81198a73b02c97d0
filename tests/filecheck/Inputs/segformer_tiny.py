"""transformers' SegformerModel at a tiny random config (tests/test_transformers_defaults.py's): two
stages, the first with a spatial reduction of 2 (keys: a strided convolution's 4 x 4 pixels); image input."""
import torch


def make():
    from transformers import SegformerConfig, SegformerModel

    torch.manual_seed(0)
    config = SegformerConfig(hidden_sizes=[8, 16], depths=[1, 1], num_encoder_blocks=2, num_attention_heads=[1, 2],
                             sr_ratios=[2, 1], patch_sizes=[7, 3], strides=[4, 2], decoder_hidden_size=16,
                             mlp_ratios=[2, 2])
    return SegformerModel(config).eval(), (torch.randn(2, 3, 32, 32),)
