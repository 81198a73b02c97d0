"""transformers ViTModel at a tiny random-init config: patch-embedding conv, CLS token concat, position
embeddings, LayerNorm encoder with SDPA attention, pooler; image input."""
import torch


def make():
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(44)
    config = ViTConfig(
        image_size=16,
        patch_size=4,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        attn_implementation="sdpa",
    )
    model = ViTModel(config).eval()
    return model, (torch.randn(2, 3, 16, 16),)
