"""transformers output classes first created under a trace stay unregistered as pytree nodes
(transformers skips registration while `torch.compiler.is_compiling()`); capture registers them."""
import torch
import torch.utils._pytree as pytree

import uniorch


def test_an_unregistered_model_output_class_is_registered_before_capture():
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.modeling_outputs import CausalLMOutputWithCrossAttentions as Output
    from transformers.utils import generic

    # the state a class created during a trace is left in
    pytree._deregister_pytree_node(Output)
    generic._registered_model_output_types.discard(Output)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=1, n_head=4, use_cache=False,
                        bos_token_id=1, eos_token_id=2, attn_implementation="eager")
    model = GPT2LMHeadModel(config).eval()
    x = torch.randint(0, 96, (2, 8))
    report = uniorch.explain(model, x, target="interpret")
    assert report.kernels, report
    assert not [f for f in report.fallbacks if f.stage == "capture"], report
    assert Output in pytree.SUPPORTED_NODES
    with torch.no_grad():
        torch.testing.assert_close(uniorch.compile(model, "interpret")(x).logits, model(x).logits,
                                   rtol=1e-4, atol=1e-5)
