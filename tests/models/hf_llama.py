"""transformers LlamaForCausalLM at a tiny random-init config (GQA, RoPE, RMSNorm, SwiGLU), SDPA attention,
no cache; called with input_ids and an attention_mask kwarg, returns a CausalLMOutputWithPast."""
import torch


def make():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(40)
    config = LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        use_cache=False,
        attn_implementation="sdpa",
    )
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 96, (2, 8))
    return model, (ids,), {"attention_mask": torch.ones(2, 8, dtype=torch.long), "use_cache": False}
