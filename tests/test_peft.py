"""peft's LoRA around a transformers model, compiled: how many users fine-tune one. Training steps
the adapters only; generate goes through `PeftModel.generate`, which hands the loop to the model
inside. Everything against the same model run eagerly, on fresh random inputs."""
import copy

import pytest
import torch

import uniorch

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")


def _lora_llama(seed: int):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    model = peft.get_peft_model(transformers.LlamaForCausalLM(config), lora)
    for name, p in model.named_parameters():  # LoRA's B starts at zero: give the adapters a value
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.2)
    return model


def test_lora_fine_tuning_matches_eager():
    eager = _lora_llama(0)
    compiled = uniorch.compile(copy.deepcopy(eager), target="interpret")
    trainable = lambda m: [p for p in m.parameters() if p.requires_grad]  # noqa: E731
    opt_e, opt_c = (torch.optim.AdamW(trainable(m), lr=1e-2) for m in (eager, compiled))
    for _ in range(2):
        ids = torch.randint(0, 96, (2, 9))
        loss_e, loss_c = eager(input_ids=ids, labels=ids).loss, compiled(input_ids=ids, labels=ids).loss
        loss_e.backward()
        loss_c.backward()
        torch.testing.assert_close(loss_c, loss_e, rtol=1e-5, atol=1e-6)
        for p, q in zip(trainable(compiled), trainable(eager)):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
        for opt in (opt_e, opt_c):
            opt.step()
            opt.zero_grad()
    for (name, p), q in zip(compiled.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")
    assert sum(p.requires_grad for p in compiled.parameters()) == 8  # A and B of q and v, two layers
    tc = compiled.training_compile
    assert tc.forward and tc.backward and tc.failure is None and not tc.eager_graphs


def test_generate_of_a_peft_model_is_compiled():
    """`PeftModel.generate` calls `base_model.generate`: the loop calls the transformers model's
    forward, never the PeftModel's. Swapping the PeftModel's forward compiled nothing, and generate
    ran eagerly without a word (uniorch/generation.py)."""
    model = _lora_llama(1).eval()
    ids = torch.randint(1, 96, (2, 6))
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False, pad_token_id=0,
              output_logits=True, return_dict_in_generate=True)
    want = model.generate(input_ids=ids, **kw)
    cm = uniorch.compile(model, target="interpret")
    got = cm.generate(input_ids=ids, **kw)
    assert torch.equal(got.sequences, want.sequences), (got.sequences, want.sequences)
    for g, w in zip(got.logits, want.logits):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    # the prefill, the first step, and one symbolic compile for the later steps, all of them
    # compiled whole, and the model left as it was
    assert cm.cache_size == 3, cm.recompiles
    inner = model.get_base_model()
    assert "forward" not in vars(inner) and "forward" not in vars(model)
    rep = cm.explain()  # the last decode step's
    assert rep.kernels and not rep.fallbacks, str(rep)
    assert any("lora_A" in where for k in rep.kernels for _, where in k.ops), str(rep)


def test_explain_before_any_call_asks_for_inputs():
    cm = uniorch.compile(_lora_llama(2).eval(), target="interpret")
    with pytest.raises(TypeError, match=r"explain\(\) with no inputs reports the last call .* has not been called yet"):
        cm.explain()
