"""transformers decoders in their default settings (KV cache returned, SDPA attention), built from
tiny random configs: captured whole (the cache is a pytree of graph outputs, capture/
library_pytrees.py; views after SDPA valid, capture/sdpa_layout.py), compiled with no eager
fallback, logits and every cached key and value equal to eager's. 72 architectures: 25 decoders with
their cache, 47 others (encoders, encoder-decoders, state-space and hybrid, MoE, vision, audio,
vision-language). CI
runs three families; the rest with UNIORCH_SLOW_TESTS=1."""
import pytest
import torch
import torch.utils._pytree as pytree

import uniorch
from uniorch import config

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")

_SMALL = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=64)
MODELS = {
    "llama": lambda T: T.LlamaForCausalLM(T.LlamaConfig(num_key_value_heads=2, **_SMALL)),
    "gpt2": lambda T: T.GPT2LMHeadModel(T.GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64)),
    "opt": lambda T: T.OPTForCausalLM(T.OPTConfig(vocab_size=96, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                                                  num_attention_heads=4, max_position_embeddings=64,
                                                  word_embed_proj_dim=32)),
    "mistral": lambda T: T.MistralForCausalLM(T.MistralConfig(num_key_value_heads=2, **_SMALL)),
    "qwen2": lambda T: T.Qwen2ForCausalLM(T.Qwen2Config(num_key_value_heads=2, **_SMALL)),
    "gpt_neox": lambda T: T.GPTNeoXForCausalLM(T.GPTNeoXConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                                                               num_hidden_layers=2, num_attention_heads=4,
                                                               max_position_embeddings=64)),
    "phi": lambda T: T.PhiForCausalLM(T.PhiConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                                                  num_hidden_layers=2, num_attention_heads=4,
                                                  max_position_embeddings=64)),
    "qwen3": lambda T: T.Qwen3ForCausalLM(T.Qwen3Config(num_key_value_heads=2, head_dim=8, **_SMALL)),
    # sliding-window layers (window 4 < 8 tokens) beside full ones, logit soft-capping
    "gemma2": lambda T: T.Gemma2ForCausalLM(T.Gemma2Config(num_key_value_heads=2, head_dim=8, sliding_window=4,
                                                           **_SMALL)),
    "gemma3": lambda T: T.Gemma3ForCausalLM(T.Gemma3TextConfig(num_key_value_heads=2, head_dim=8, sliding_window=4,
                                                               **_SMALL)),
    "phi3": lambda T: T.Phi3ForCausalLM(T.Phi3Config(num_key_value_heads=2, pad_token_id=0, **_SMALL)),
    "stablelm": lambda T: T.StableLmForCausalLM(T.StableLmConfig(num_key_value_heads=2, **_SMALL)),
    "gptj": lambda T: T.GPTJForCausalLM(T.GPTJConfig(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                                     rotary_dim=4)),
    "olmo": lambda T: T.OlmoForCausalLM(T.OlmoConfig(num_key_value_heads=2, pad_token_id=0, **_SMALL)),
    "olmo2": lambda T: T.Olmo2ForCausalLM(T.Olmo2Config(num_key_value_heads=2, pad_token_id=0, **_SMALL)),
    "starcoder2": lambda T: T.Starcoder2ForCausalLM(T.Starcoder2Config(num_key_value_heads=2, **_SMALL)),
    "granite": lambda T: T.GraniteForCausalLM(T.GraniteConfig(num_key_value_heads=2, **_SMALL)),
    "cohere": lambda T: T.CohereForCausalLM(T.CohereConfig(num_key_value_heads=2, pad_token_id=0, **_SMALL)),
    # multi-query attention (one k/v head, fused into c_attn), partial rotary with q/k LayerNorm,
    # squared-ReLU MLP, GPT-J-style rotary, sinusoidal positions, layers without RoPE
    "gpt_bigcode": lambda T: T.GPTBigCodeForCausalLM(T.GPTBigCodeConfig(vocab_size=96, n_embd=32, n_layer=2,
                                                                        n_head=4, n_positions=64, multi_query=True)),
    "persimmon": lambda T: T.PersimmonForCausalLM(T.PersimmonConfig(**_SMALL)),
    "nemotron": lambda T: T.NemotronForCausalLM(T.NemotronConfig(num_key_value_heads=2, **_SMALL)),
    "codegen": lambda T: T.CodeGenForCausalLM(T.CodeGenConfig(vocab_size=96, n_embd=32, n_layer=2, n_head=4,
                                                              n_positions=64, rotary_dim=4)),
    "biogpt": lambda T: T.BioGptForCausalLM(T.BioGptConfig(**_SMALL)),
    "xglm": lambda T: T.XGLMForCausalLM(T.XGLMConfig(vocab_size=96, d_model=32, ffn_dim=64, num_layers=2,
                                                     attention_heads=4, max_position_embeddings=64)),
    "smollm3": lambda T: T.SmolLM3ForCausalLM(T.SmolLM3Config(num_key_value_heads=2, pad_token_id=0, **_SMALL)),
}
def _torch_init(model):
    """PyTorch's own initialisation of convolutions, linears and norms. transformers draws their
    weights with std 0.02 (BatchNorm scales too), and through MobileViT's and LeViT's stages a tiny
    config's activations vanish (MobileViT's output is exactly 0, LeViT's 1e-9): any kernels would
    match eager there."""
    for m in model.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear, torch.nn.modules.batchnorm._BatchNorm, torch.nn.LayerNorm)):
            m.reset_parameters()
    return model


_VISION = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
_AUDIO = dict(conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8,
              num_conv_pos_embedding_groups=4)
# encoders, an encoder-decoder (T5 with its cache), vision, MoE: name -> (factory, inputs)
OTHERS = {
    "t5": lambda T: T.T5ForConditionalGeneration(T.T5Config(vocab_size=96, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                                            num_heads=4, decoder_start_token_id=0)),
    "vit": lambda T: T.ViTModel(T.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                            intermediate_size=64, image_size=16, patch_size=4)),
    "mixtral": lambda T: T.MixtralForCausalLM(T.MixtralConfig(num_key_value_heads=2, num_local_experts=4,
                                                              num_experts_per_tok=2, **_SMALL)),
    "gemma": lambda T: T.GemmaForCausalLM(T.GemmaConfig(num_key_value_heads=2, head_dim=8, **_SMALL)),
    "falcon": lambda T: T.FalconForCausalLM(T.FalconConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2,
                                                           num_attention_heads=4)),
    "bloom": lambda T: T.BloomForCausalLM(T.BloomConfig(vocab_size=96, hidden_size=32, n_layer=2, n_head=4)),
    "bert": lambda T: T.BertModel(T.BertConfig(**_SMALL)),
    "roberta": lambda T: T.RobertaModel(T.RobertaConfig(**_SMALL)),
    "distilbert": lambda T: T.DistilBertModel(T.DistilBertConfig(vocab_size=96, dim=32, hidden_dim=64, n_layers=2,
                                                                 n_heads=4, max_position_embeddings=64)),
    "bart": lambda T: T.BartForConditionalGeneration(T.BartConfig(
        vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)),
    "whisper": lambda T: T.WhisperModel(T.WhisperConfig(
        vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8, max_source_positions=16,
        max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)),
    "electra": lambda T: T.ElectraModel(T.ElectraConfig(embedding_size=32, **_SMALL)),
    "albert": lambda T: T.AlbertModel(T.AlbertConfig(embedding_size=32, **_SMALL)),
    "deit": lambda T: T.DeiTModel(T.DeiTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                              intermediate_size=64, image_size=16, patch_size=4)),
    "convnext": lambda T: T.ConvNextModel(T.ConvNextConfig(hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1],
                                                          image_size=32)),
    "swin": lambda T: T.SwinModel(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                              num_heads=[2, 4], window_size=4)),
    # state-space and hybrid decoders, MoE routers (DeepSeek's grouped top-k, Jamba's, Llama 4's
    # shared expert), ModernBERT's local attention, vision and audio encoders
    "mamba": lambda T: T.MambaForCausalLM(T.MambaConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2,
                                                        state_size=8)),
    "mamba2": lambda T: T.Mamba2ForCausalLM(T.Mamba2Config(vocab_size=96, hidden_size=32, num_hidden_layers=2,
                                                           state_size=8, num_heads=4, head_dim=16, n_groups=1,
                                                           chunk_size=4)),
    "recurrent_gemma": lambda T: T.RecurrentGemmaForCausalLM(T.RecurrentGemmaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, lru_width=32, attention_window_size=8, block_types=["recurrent", "attention"],
        head_dim=8)),
    "qwen3_moe": lambda T: T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(num_key_value_heads=2, head_dim=8, num_experts=4,
                                                                  num_experts_per_tok=2, moe_intermediate_size=32,
                                                                  **_SMALL)),
    "deepseek_v3": lambda T: T.DeepseekV3ForCausalLM(T.DeepseekV3Config(
        vocab_size=96, hidden_size=32, intermediate_size=64, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, n_group=1,
        topk_group=1, first_k_dense_replace=1, q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=4,
        qk_nope_head_dim=8, v_head_dim=8, max_position_embeddings=64)),
    "jamba": lambda T: T.JambaForCausalLM(T.JambaConfig(num_key_value_heads=2, num_experts=2, num_experts_per_tok=1,
                                                        mamba_d_state=8, attn_layer_period=2, attn_layer_offset=1,
                                                        expert_layer_period=2, expert_layer_offset=1, **_SMALL)),
    "llama4": lambda T: T.Llama4ForCausalLM(T.Llama4TextConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, intermediate_size_mlp=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_local_experts=4, num_experts_per_tok=1,
        max_position_embeddings=64)),
    "modernbert": lambda T: T.ModernBertModel(T.ModernBertConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                                                                 num_hidden_layers=2, num_attention_heads=4,
                                                                 pad_token_id=0, global_attn_every_n_layers=2,
                                                                 local_attention=4)),
    "resnet": lambda T: T.ResNetModel(T.ResNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1])),
    "segformer": lambda T: T.SegformerModel(T.SegformerConfig(
        hidden_sizes=[8, 16], depths=[1, 1], num_encoder_blocks=2, num_attention_heads=[1, 2], sr_ratios=[2, 1],
        patch_sizes=[7, 3], strides=[4, 2], decoder_hidden_size=16, mlp_ratios=[2, 2])),
    "wav2vec2": lambda T: T.Wav2Vec2Model(T.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16),
        conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4)),
    # DeBERTa-v2/v3's disentangled attention (relative positions gathered in the scores), CLIP's and
    # SigLIP's towers, DINOv2 (position embeddings interpolated to the image), BEiT's relative position
    # bias, MobileBERT's bottlenecks, HuBERT and WavLM (gated relative position bias), MPNet,
    # Qwen2-MoE's shared expert, Falcon-Mamba, MobileViT, LeViT, Pegasus, YOLOS, DPT
    "deberta_v2": lambda T: T.DebertaV2Model(T.DebertaV2Config(
        relative_attention=True, position_buckets=8, max_relative_positions=16, pos_att_type=["p2c", "c2p"],
        norm_rel_ebd="layer_norm", share_att_key=True, **_SMALL)),
    "mpt": lambda T: T.MptForCausalLM(T.MptConfig(vocab_size=96, d_model=32, n_heads=4, n_layers=2, expansion_ratio=2,
                                                  max_seq_len=64)),  # ALiBi; no cache by default
    "clip_text": lambda T: T.CLIPTextModel(T.CLIPTextConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                                                           num_hidden_layers=2, num_attention_heads=4,
                                                           max_position_embeddings=64)),
    "clip_vision": lambda T: T.CLIPVisionModel(T.CLIPVisionConfig(image_size=32, patch_size=8, **_VISION)),
    "siglip_vision": lambda T: T.SiglipVisionModel(T.SiglipVisionConfig(image_size=32, patch_size=8, **_VISION)),
    "dinov2": lambda T: T.Dinov2Model(T.Dinov2Config(image_size=32, patch_size=8, **_VISION)),
    "beit": lambda T: T.BeitModel(T.BeitConfig(image_size=32, patch_size=8, use_relative_position_bias=True,
                                               **_VISION)),
    "mobilebert": lambda T: T.MobileBertModel(T.MobileBertConfig(
        vocab_size=96, hidden_size=32, embedding_size=16, intermediate_size=32, true_hidden_size=16,
        intra_bottleneck_size=16, num_hidden_layers=2, num_attention_heads=4, num_feedforward_networks=2,
        max_position_embeddings=64)),
    "hubert": lambda T: T.HubertModel(T.HubertConfig(**_AUDIO, **_VISION)),
    "wavlm": lambda T: T.WavLMModel(T.WavLMConfig(num_buckets=16, max_bucket_distance=32, **_AUDIO, **_VISION)),
    "mpnet": lambda T: T.MPNetModel(T.MPNetConfig(**_SMALL)),
    "qwen2_moe": lambda T: T.Qwen2MoeForCausalLM(T.Qwen2MoeConfig(
        num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, **_SMALL)),
    "falcon_mamba": lambda T: T.FalconMambaForCausalLM(T.FalconMambaConfig(vocab_size=96, hidden_size=32,
                                                                           num_hidden_layers=2, state_size=8)),
    "mobilevit": lambda T: _torch_init(T.MobileViTModel(T.MobileViTConfig(image_size=32, hidden_sizes=[16, 24, 32],
                                                              neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32],
                                                              num_attention_heads=2))),
    "levit": lambda T: _torch_init(T.LevitModel(T.LevitConfig(
        image_size=32, hidden_sizes=[16, 24, 32], num_attention_heads=[1, 2, 2], depths=[1, 1, 1], key_dim=[8, 8, 8]))),
    "pegasus": lambda T: T.PegasusForConditionalGeneration(T.PegasusConfig(
        vocab_size=96, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)),
    "yolos": lambda T: T.YolosModel(T.YolosConfig(image_size=[32, 32], patch_size=8, num_detection_tokens=4,
                                                  **_VISION)),
    # vision-language: LLaVA (CLIP tower, projector, Llama), Qwen2-VL (its own vision tower, M-RoPE: the
    # positions are computed in Python from the token types, where Dynamo breaks the graph)
    "llava": lambda T: T.LlavaForConditionalGeneration(T.LlavaConfig(
        vision_config=T.CLIPVisionConfig(image_size=16, patch_size=4, **_VISION),
        text_config=T.LlamaConfig(num_key_value_heads=2, **_SMALL), image_token_index=95, image_seq_length=16)),
    "qwen2_vl": lambda T: T.Qwen2VLForConditionalGeneration(T.Qwen2VLConfig(
        text_config=dict(num_key_value_heads=2, rope_scaling={"type": "mrope", "mrope_section": [1, 1, 2]}, **_SMALL),
        vision_config=dict(depth=2, embed_dim=16, hidden_size=32, num_heads=2, patch_size=4, spatial_merge_size=2,
                           temporal_patch_size=2, in_chans=3),
        image_token_id=95, video_token_id=94, vision_start_token_id=93)),
    "dpt": lambda T: T.DPTModel(T.DPTConfig(image_size=32, patch_size=8, backbone_out_indices=[0, 1],
                                            neck_hidden_sizes=[8, 16], fusion_hidden_size=16, readout_type="project",
                                            **_VISION)),
}
# ops that run eagerly, by where they are (none since Mixtral's prefill experts compile)
KNOWN_FALLBACKS: dict[str, str] = {}
CI = ("llama", "gpt2", "opt")


def _inputs(name):
    if name in ("vit", "deit"):
        return (torch.randn(2, 3, 16, 16),), {}
    if name in ("convnext", "swin", "resnet", "segformer", "clip_vision", "siglip_vision", "beit", "mobilevit",
                "levit", "yolos", "dpt"):
        return (torch.randn(2, 3, 32, 32),), {}
    if name == "dinov2":  # 40 px: its position embeddings (for 32 px) interpolated bicubically
        return (torch.randn(2, 3, 40, 40),), {}
    if name in ("wav2vec2", "hubert", "wavlm"):  # raw audio samples
        return (torch.randn(2, 400),), {}
    if name == "llava":  # 16 image tokens, one per patch of a 16 px image
        ids = torch.randint(0, 90, (2, 24))
        ids[:, 2:18] = 95
        return (), {"input_ids": ids, "pixel_values": torch.randn(2, 3, 16, 16)}
    if name == "qwen2_vl":  # 4 x 4 patches merged 2 x 2 into 4 image tokens
        ids = torch.randint(0, 90, (1, 12))
        ids[0, 3], ids[0, 4:8] = 93, 95
        return (), {"input_ids": ids, "pixel_values": torch.randn(16, 3 * 2 * 4 * 4),
                    "image_grid_thw": torch.tensor([[1, 4, 4]]), "mm_token_type_ids": (ids == 95).long()}
    decoder = {"decoder_input_ids": torch.randint(0, 96, (2, 5))}
    if name == "whisper":  # log-mel features: (batch, mel bins, 2 * max_source_positions)
        return (torch.randn(2, 8, 32),), decoder
    ids = torch.randint(0, 96, (2, 8))
    return (ids,), (decoder if name in ("t5", "bart", "pegasus") else {})


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_other_architectures_compile(name):
    """Encoders, encoder-decoders (T5, BART, Whisper: their caches too), vision (ViT, DeiT, ConvNeXt,
    Swin, ResNet, SegFormer), audio (wav2vec 2.0), Mamba and hybrids, MoE (Mixtral, Qwen3-MoE,
    DeepSeek-V3, Jamba, Llama 4) in default settings: equal to eager, at least 90 % of the captured ops
    in kernels, no eager fallback but the known ones (KNOWN_FALLBACKS); a second call compiles nothing."""
    if not config.flag("UNIORCH_SLOW_TESTS"):
        pytest.skip("UNIORCH_SLOW_TESTS=1 runs these")
    torch.manual_seed(0)
    model = OTHERS[name](transformers).eval()
    args, kwargs = _inputs(name)
    cm = uniorch.compile(model, target="interpret")
    out, ref = cm(*args, **kwargs), model(*args, **kwargs)
    key = "logits" if hasattr(ref, "logits") else "last_hidden_state"
    torch.testing.assert_close(getattr(out, key), getattr(ref, key), rtol=1e-4, atol=1e-5)
    scale = getattr(ref, key).abs().max()
    assert scale > 1e-6 and (getattr(out, key) - getattr(ref, key)).abs().max() <= 1e-4 * scale
    if getattr(ref, "past_key_values", None) is not None:  # an encoder-decoder's self and cross caches
        got, want = pytree.tree_leaves(out.past_key_values), pytree.tree_leaves(ref.past_key_values)
        assert type(out.past_key_values) is type(ref.past_key_values) and len(got) == len(want) > 0
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    rep = cm.explain(*args, **kwargs)
    assert rep.compiled_ops >= 0.9 * rep.captured_ops, str(rep)
    cm(*args, **kwargs)  # the same call again: its guard holds (a forward's own copies of its config are not guarded)
    assert cm.cache_size == 1, cm.recompiles
    if name in KNOWN_FALLBACKS:
        assert all(KNOWN_FALLBACKS[name] in f.where for f in rep.fallbacks), str(rep)
    else:
        assert not rep.fallbacks, str(rep)


def _cache_tensors(cache):
    return [t for layer in cache.layers for t in (layer.keys, layer.values)]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_decoder_with_cache_compiles_whole(name):
    if name not in CI and not config.flag("UNIORCH_SLOW_TESTS"):
        pytest.skip("UNIORCH_SLOW_TESTS=1 runs every family")
    torch.manual_seed(0)
    model = MODELS[name](transformers).eval()
    ids = torch.randint(0, 96, (2, 8))
    cm = uniorch.compile(model, target="interpret")
    out, ref = cm(ids), model(ids)
    rep = cm.explain(ids)
    assert not rep.fallbacks, str(rep)
    assert type(out.past_key_values) is type(ref.past_key_values)
    torch.testing.assert_close(out.logits, ref.logits, rtol=1e-4, atol=1e-5)
    got, want = _cache_tensors(out.past_key_values), _cache_tensors(ref.past_key_values)
    assert len(got) == len(want) and len(got) > 0
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["llama", "gpt2", "opt", "mistral", "gpt_bigcode", "persimmon", "nemotron",
                                  "codegen", "biogpt", "xglm", "smollm3"])
def test_generate_matches_eager_token_for_token(name):
    """`uniorch.compile(model).generate(...)`: the prefill and every decode step (a DynamicCache in
    and out) are captured and compiled, and greedy decoding gives eager's tokens. Mistral's cache
    layers slide (a window of 4096): their token counter was structure, and every step compiled
    anew (runtime/library_pytrees.py); its symbolic compile holds below the window."""
    if name not in ("llama", "mistral") and not config.flag("UNIORCH_SLOW_TESTS"):
        pytest.skip("UNIORCH_SLOW_TESTS=1 runs every family")
    torch.manual_seed(1)
    model = MODELS[name](transformers).eval()
    ids = torch.randint(1, 96, (2, 6))
    mask = torch.ones_like(ids)
    want = model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0)
    cm = uniorch.compile(model, target="interpret")
    got = cm.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert torch.equal(got, want), (got, want)
    assert "forward" not in vars(model)  # the model is left as it was
    # the prefill, the first decode step (a cache appears), then the second step with the cache one
    # longer: a symbolic compile (automatic dynamic) that every later step would reuse
    entries = list(cm._cache.values()) + [e for _, e in cm._symbolic]
    assert len(entries) == cm.cache_size == 3 and len(cm._symbolic) == 1, cm.recompiles
    if name == "mistral":  # export's check of the window bounds the symbolic length
        ranges = cm._symbolic[0][0].ranges
        assert ranges and all(hi is not None and hi <= 4096 for _, hi in ranges.values()), ranges
    for e in entries:
        assert e.captured is not None, e.capture_error
        assert not e.program.fallbacks, e.program.fallbacks


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_a_second_generate_compiles_nothing(cache):
    """Each generate() routes the model's forward through its compile with a wrapper of its own;
    guarded by identity, the second generate() recompiled every spec and ran past the cache limit
    in PyTorch (the same prompts: Llama, Qwen2, Gemma2, GPT-2, T5)."""
    torch.manual_seed(2)
    model = MODELS["llama"](transformers).eval()
    cm = uniorch.compile(model)
    kw = dict(max_new_tokens=4, do_sample=False, pad_token_id=0)
    if cache == "static":
        kw["cache_implementation"] = "static"
    prompts = [torch.randint(1, 96, (2, 6)) for _ in range(4)]
    # transformers' first generate() passes the prefill no cache, later ones an empty DynamicCache
    # (one more spec, once)
    for ids in prompts[:2]:
        cm.generate(ids, **kw)
    compiled = cm.cache_size
    for ids in prompts[2:]:
        got = cm.generate(ids, **kw)
        assert torch.equal(got, model.generate(ids, **kw))
    assert cm.cache_size == compiled, cm.recompiles


@pytest.mark.parametrize("name", ["recurrent_gemma", "mamba", "mamba2", "mixtral", "qwen3_moe", "deepseek_v3", "jamba",
                                  "llama4"])
@torch.no_grad()
def test_generate_of_state_space_hybrid_and_moe_decoders_matches_eager(name):
    """Decoders whose generate carries state other than a DynamicCache (Mamba's cache params,
    RecurrentGemma's states kept on its modules: export dropped those writes, and the compiled
    steps picked other tokens) or routes tokens to experts (prefill and decode steps compiled, no
    grouped matmul left to PyTorch): eager's tokens and logits, three compiles at most (Llama 4's
    complex rotary took one per cache length)."""
    if name != "recurrent_gemma" and not config.flag("UNIORCH_SLOW_TESTS"):
        pytest.skip("UNIORCH_SLOW_TESTS=1 runs every family")
    torch.manual_seed(0)
    model = OTHERS[name](transformers).eval()
    ids = torch.randint(3, 96, (2, 6))
    kw = dict(max_new_tokens=5, do_sample=False, output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    cm = uniorch.compile(model, target="interpret")
    got, want = cm.generate(ids, **kw), model.generate(ids, **kw)
    assert torch.equal(got.sequences, want.sequences)
    for a, b in zip(got.logits, want.logits):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert cm.cache_size <= 3, cm.recompiles
    step = cm.explain()
    # RecurrentGemma's steps run through Dynamo (its states are module attributes), whose graphs
    # take the cache position as an int; the window's start max(position - 7, 0) stays a host op
    assert step.kernels and all("sym_max" in f.op for f in step.fallbacks), str(step)


@pytest.mark.parametrize("name", ["t5", "bart", "whisper"])
def test_encoder_decoder_generate_compiles_the_encoder_and_every_step(name):
    """generate runs an encoder-decoder's encoder once, through `get_encoder()`, then the loop:
    both compiled (the encoder ran eagerly before), tokens as eager's."""
    if name != "t5" and not config.flag("UNIORCH_SLOW_TESTS"):
        pytest.skip("UNIORCH_SLOW_TESTS=1 runs every family")
    torch.manual_seed(2)
    model = OTHERS[name](transformers)
    if name == "whisper":
        model = transformers.WhisperForConditionalGeneration(model.config)
        inputs = {"input_features": torch.randn(2, 8, 32)}
    else:
        inputs = {"input_ids": torch.randint(2, 96, (2, 7)), "attention_mask": torch.ones(2, 7, dtype=torch.long)}
    model.eval()
    kw = dict(max_new_tokens=3, do_sample=False, decoder_start_token_id=0, pad_token_id=0)
    want = model.generate(**inputs, **kw)
    cm = uniorch.compile(model, target="interpret")
    got = cm.generate(**inputs, **kw)
    assert torch.equal(got, want), (got, want)
    (encoder,) = cm._inner.values()
    assert encoder._model is model.get_encoder() and encoder.cache_size == 1
    for e in [*encoder._cache.values(), *cm._cache.values()]:
        assert e.captured is not None and not e.program.fallbacks, e.capture_error
    assert cm.cache_size == 4, cm.recompiles  # the encoder, the first step, the second, then symbolic
    assert "forward" not in vars(model) and "forward" not in vars(model.get_encoder())


def test_generate_left_padded_batch_matches_eager():
    """A batch of prompts of different lengths, padded on the left: generate computes GPT-2's
    absolute positions from the attention mask and passes them as `position_ids`, but only to a
    forward whose signature names them. The compiled forward hid the signature behind `(*a, **k)`:
    positions started at 0 in the padding, and the padded rows decoded other tokens than eager."""
    torch.manual_seed(1)
    model = MODELS["gpt2"](transformers).eval()
    ids = torch.randint(1, 96, (3, 7))
    mask = torch.ones_like(ids)
    ids[0, :3], mask[0, :3], ids[1, :1], mask[1, :1] = 0, 0, 0, 0
    kw = dict(attention_mask=mask, max_new_tokens=4, do_sample=False, pad_token_id=0, output_logits=True,
              return_dict_in_generate=True)
    want = model.generate(ids, **kw)
    got = uniorch.compile(model, target="interpret").generate(ids, **kw)
    assert torch.equal(got.sequences, want.sequences), (got.sequences, want.sequences)
    for g, w in zip(got.logits, want.logits):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_generate_past_the_sliding_window_compiles_once(cache):
    """Decoding past a sliding window (Mistral's 4096 tokens, Gemma 3's 512 at full size; 4 here):
    each sliding layer counts its tokens in a Python int, which grew every step, so every step
    compiled anew until the compile limit and ran eagerly after it. The counters travel as sizes
    (runtime/library_pytrees.py): the prefill, the first step, then one symbolic compile for
    every later step, with the window's check as its guard. Eager's tokens and counters."""
    torch.manual_seed(3)
    model = transformers.MistralForCausalLM(transformers.MistralConfig(num_key_value_heads=2, sliding_window=4,
                                                                       **_SMALL)).eval()
    ids = torch.randint(1, 96, (2, 6))
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False, pad_token_id=0,
              return_dict_in_generate=True)
    if cache == "static":
        kw["cache_implementation"] = "static"
    want = model.generate(ids, **kw)
    cm = uniorch.compile(model, target="interpret")
    got = cm.generate(ids, **kw)
    assert torch.equal(got.sequences, want.sequences), (got.sequences, want.sequences)
    counter = "cumulative_length" if cache == "dynamic" else "cumulative_length_int"
    for g, w in zip(got.past_key_values.layers, want.past_key_values.layers):
        assert type(getattr(g, counter)) is int and getattr(g, counter) == getattr(w, counter) == 11
    assert cm.cache_size == 3 and len(cm._symbolic) == 1, cm.recompiles
    guard, entry = cm._symbolic[0]
    assert any(lo is not None and lo >= 4 for lo, _ in guard.ranges.values()), guard.ranges  # past the window
    for e in list(cm._cache.values()) + [entry]:
        assert e.captured is not None, e.capture_error
        assert not e.program.fallbacks, e.program.fallbacks


def test_generate_with_torch_compile_backend():
    """transformers' recipe, `model.forward = torch.compile(model.forward, backend=...)`, with
    uniorch's backend: Dynamo's graphs go through uniorch and greedy tokens equal eager's."""
    import torch._dynamo

    from uniorch.api import torch_backend

    torch._dynamo.reset()
    torch.manual_seed(2)
    model = MODELS["llama"](transformers).eval()
    ids = torch.randint(1, 96, (2, 6))
    mask = torch.ones_like(ids)
    want = model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0)
    graphs = []

    def backend(gm, example_inputs, **kw):  # uniorch's backend, counting the graphs it is given
        graphs.append(gm)
        return torch_backend(gm, example_inputs, **kw)

    model.forward = torch.compile(model.forward, backend=backend, options={"target": "interpret"})
    got = model.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert torch.equal(got, want), (got, want)
    assert graphs


def test_static_cache_forward_updates_the_callers_cache():
    """A StaticCache passed as past_key_values: the first call allocates its tensors (lazily), every
    call writes them in place (index_copy_) and advances its position counter, and the model returns
    that very cache. Compiled, the caller's cache is left as eager leaves its own: same object, same
    tensors written in place, equal keys, values and counters; logits equal eager's."""
    torch.manual_seed(3)
    model = MODELS["llama"](transformers).eval()
    mine = transformers.StaticCache(config=model.config, max_cache_len=16)
    ref = transformers.StaticCache(config=model.config, max_cache_len=16)
    cm = uniorch.compile(model, target="interpret")
    for x in (torch.randint(1, 96, (2, 6)), torch.randint(1, 96, (2, 1)), torch.randint(1, 96, (2, 1))):
        before = [(l.keys, l.values, l.cumulative_length) for l in mine.layers if l.is_initialized]
        out, want = cm(x, past_key_values=mine), model(x, past_key_values=ref)
        assert want.past_key_values is ref and out.past_key_values is mine
        torch.testing.assert_close(out.logits, want.logits, rtol=1e-4, atol=1e-5)
        for (k, v, n), layer in zip(before, mine.layers):
            assert layer.keys is k and layer.values is v and layer.cumulative_length is n
        for got, exp in zip(mine.layers, ref.layers):
            assert got.is_initialized and int(got.cumulative_length) == int(exp.cumulative_length)
            torch.testing.assert_close(got.keys, exp.keys, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(got.values, exp.values, rtol=1e-4, atol=1e-5)
    assert len(cm._cache) == 2  # the prefill (cache not yet allocated) and the decode step
    for e in cm._cache.values():
        assert e.captured is not None and not e.program.fallbacks


def test_generate_with_static_cache():
    """generate(..., cache_implementation="static") through the compiled model: the prefill and the
    decode steps (one input spec: the static cache keeps its shape) compiled, eager's tokens."""
    torch.manual_seed(1)
    model = MODELS["llama"](transformers).eval()
    ids = torch.randint(1, 96, (2, 6))
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False, pad_token_id=0,
              cache_implementation="static")
    want = model.generate(ids, **kw)
    cm = uniorch.compile(model, target="interpret")
    got = cm.generate(ids, **kw)
    assert torch.equal(got, want), (got, want)
    entries = list(cm._cache.values())
    assert len(entries) == 2
    for e in entries:
        assert e.captured is not None, e.capture_error
        assert not e.program.fallbacks, e.program.fallbacks


@torch.no_grad()
def test_a_config_flag_set_after_compiling_is_seen():
    # `model.config.output_hidden_states = True` after a compile: the capture read it as False and
    # the compile went on returning no hidden states (torch.compile guards config reads too)
    torch.manual_seed(0)
    model = MODELS["gpt2"](transformers).eval()
    ids = torch.randint(0, 96, (2, 8))
    cm = uniorch.compile(model, target="interpret")
    assert cm(ids).hidden_states is None
    model.config.output_hidden_states = True
    out, ref = cm(ids), model(ids)
    assert out.hidden_states is not None and len(out.hidden_states) == len(ref.hidden_states) == 3
    for g, w in zip(out.hidden_states, ref.hidden_states):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert cm.recompiles == ["attributes changed (config.output_hidden_states: False -> True)"], cm.recompiles
    assert len(cm(ids).hidden_states) == 3 and cm.cache_size == 2
