"""transformers GPT2LMHeadModel at a tiny random-init config, eager attention (hand-written softmax
attention with causal mask), Conv1D layers, gelu_new; returns a ModelOutput."""
import torch


def make():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(41)
    config = GPT2Config(
        vocab_size=96,
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=4,
        bos_token_id=1,
        eos_token_id=2,
        use_cache=False,
        attn_implementation="eager",
    )
    model = GPT2LMHeadModel(config).eval()
    return model, (torch.randint(0, 96, (2, 10)),)
