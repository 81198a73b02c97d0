"""transformers' SwinModel at a tiny random config (tests/test_transformers_defaults.py's): two
stages of 4 x 4 windows, 2 and 4 heads, relative position bias; image input."""
import torch


def make():
    from transformers import SwinConfig, SwinModel

    torch.manual_seed(0)
    config = SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4)
    return SwinModel(config).eval(), (torch.randn(2, 3, 32, 32),)
