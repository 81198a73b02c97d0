"""transformers' Trainer given `uniorch.compile(model)`: the way many users train a transformers
model. Trainer wraps, unwraps, switches modes and steps its own AdamW and scheduler around the
compiled model; losses and weights against the same Trainer run eagerly."""
import copy

import pytest
import torch

import uniorch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # Trainer needs it
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning", "ignore::DeprecationWarning")


class _Prompts(torch.utils.data.Dataset):
    def __init__(self, n: int = 12, length: int = 10):
        g = torch.Generator().manual_seed(1)
        self.items = [torch.randint(1, 96, (int(torch.randint(4, length + 1, (1,), generator=g)),), generator=g)
                      for _ in range(n)]
        self.length = length

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return {"input_ids": self.items[i]}

    def collate(self, batch):
        """Padded on the right to one length (one input spec), padding masked out of the loss."""
        ids = torch.zeros(len(batch), self.length, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, b in enumerate(batch):
            ids[i, :len(b["input_ids"])], mask[i, :len(b["input_ids"])] = b["input_ids"], 1
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def _train(model, out_dir):
    data = _Prompts()
    args = transformers.TrainingArguments(
        output_dir=str(out_dir), per_device_train_batch_size=4, max_steps=3, learning_rate=1e-3, logging_steps=1,
        report_to=[], save_strategy="no", use_cpu=True, seed=0, dataloader_num_workers=0, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, data_collator=data.collate)
    trainer.train()
    return [h["loss"] for h in trainer.state.log_history if "loss" in h], trainer


def test_trainer_trains_the_compiled_model_like_eager(tmp_path):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=4, n_positions=64, resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0)
    eager = transformers.GPT2LMHeadModel(config)
    compiled = uniorch.compile(copy.deepcopy(eager), target="interpret")
    want, _ = _train(eager, tmp_path / "eager")
    got, trainer = _train(compiled, tmp_path / "compiled")
    assert len(got) == len(want) == 3
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(compiled.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
    tc = compiled.training_compile
    assert tc.forward and tc.backward and tc.failure is None and not tc.eager_graphs
    # saved as Trainer saves a transformers model (config, tied lm_head and wte once): it raised
    # safetensors' shared-tensor error when Trainer took the compiled model for a bare module
    trainer.save_model(str(tmp_path / "saved"))
    loaded = transformers.GPT2LMHeadModel.from_pretrained(str(tmp_path / "saved"))
    assert loaded.lm_head.weight is loaded.transformer.wte.weight
    for (name, p), q in zip(loaded.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def test_the_compiled_model_is_an_instance_of_the_models_class():
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=96, n_embd=32, n_layer=1, n_head=4))
    compiled = uniorch.compile(model, target="interpret")
    assert isinstance(compiled, transformers.PreTrainedModel) and isinstance(compiled, uniorch.api.CompiledModel)
    assert type(compiled) is not type(model) and repr(compiled).startswith("CompiledModel(")
