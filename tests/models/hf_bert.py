"""transformers BertModel (encoder) at a tiny random-init config: word/position/token-type embeddings,
LayerNorm, bidirectional eager attention with a padding attention_mask, GELU, pooler (tanh)."""
import torch


def make():
    from transformers import BertConfig, BertModel

    torch.manual_seed(42)
    config = BertConfig(
        vocab_size=96,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        type_vocab_size=2,
        attn_implementation="eager",
    )
    model = BertModel(config).eval()
    ids = torch.randint(0, 96, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    types = torch.zeros(2, 9, dtype=torch.long)
    types[:, 5:] = 1
    return model, (ids,), {"attention_mask": mask, "token_type_ids": types}
