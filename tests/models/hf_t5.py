"""transformers T5ForConditionalGeneration (encoder-decoder) at a tiny random-init config: relative
position buckets, T5 RMSNorm, cross-attention, gated-gelu FF; eager attention (in-place position_bias
updates); returns a Seq2SeqLMOutput."""
import torch


def make():
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(43)
    config = T5Config(
        vocab_size=96,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        feed_forward_proj="gated-gelu",
        use_cache=False,
        dropout_rate=0.0,
        decoder_start_token_id=0,
        pad_token_id=0,
        attn_implementation="eager",
    )
    model = T5ForConditionalGeneration(config).eval()
    ids = torch.randint(0, 96, (2, 7))
    dec = torch.randint(0, 96, (2, 5))
    return model, (ids,), {"decoder_input_ids": dec, "use_cache": False}
