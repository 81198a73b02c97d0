"""transformers' BloomForCausalLM at a tiny random config (tests/test_transformers_defaults.py's):
two layers of 4 heads, ALiBi, the cache on; token ids with a left-padded attention mask."""
import torch


def make():
    from transformers import BloomConfig, BloomForCausalLM

    torch.manual_seed(0)
    model = BloomForCausalLM(BloomConfig(vocab_size=96, hidden_size=32, n_layer=2, n_head=4)).eval()
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, :3] = 0
    return model, (torch.randint(0, 96, (2, 8)),), {"attention_mask": mask}
