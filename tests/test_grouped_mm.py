"""A mixture of experts' grouped matmul (capture/grouped_mm.py): transformers' custom op and
aten._grouped_mm compile as a gathered batched matmul for as many rows as experts or fewer (decode
steps), against eager on fresh inputs; longer calls keep the op."""
import pytest
import torch
from torch import nn

import uniorch

transformers = pytest.importorskip("transformers")
import transformers.integrations.moe  # noqa: E402,F401 - registers transformers::grouped_mm_fallback

E, K, N = 6, 16, 24


def _ends(rows: int, g: torch.Generator) -> torch.Tensor:
    """Cumulative row ends of E groups covering `rows` rows, some groups empty."""
    cuts = torch.sort(torch.randint(0, rows + 1, (E - 1,), generator=g)).values
    return torch.cat([cuts, torch.tensor([rows])]).to(torch.int32)


class _Experts(nn.Module):
    def __init__(self, op: str, dtype):
        super().__init__()
        self.op = op
        self.weight = nn.Parameter(torch.randn(E, K, N, dtype=dtype))

    def forward(self, x, ends):
        if self.op == "transformers":
            return torch.ops.transformers.grouped_mm_fallback(x, self.weight, ends)
        return torch._grouped_mm(x, self.weight, offs=ends)


@pytest.mark.parametrize("op,dtype", [("transformers", torch.float32), ("transformers", torch.bfloat16),
                                      ("aten", torch.bfloat16)])
@torch.no_grad()
def test_a_grouped_matmul_of_few_rows_compiles(op, dtype):
    g = torch.Generator().manual_seed(3)
    model = _Experts(op, dtype)
    cm = uniorch.compile(model, target="interpret")
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for rows in (1, 4, E, 3):
        x = torch.randn(rows, K, generator=g).to(dtype)
        ends = _ends(rows, g)
        torch.testing.assert_close(cm(x, ends), model(x, ends), **tol)
        rep = cm.explain(x, ends)
        assert not rep.fallbacks and rep.kernels, str(rep)
    x = torch.randn(2 * E, K, generator=g).to(dtype)  # a prefill: more rows than experts keep the op
    ends = _ends(2 * E, g)
    torch.testing.assert_close(cm(x, ends), model(x, ends), **tol)
    assert [f.op.split(".")[1] for f in cm.explain(x, ends).fallbacks] == [
        "grouped_mm_fallback" if op == "transformers" else "_grouped_mm"]


@torch.no_grad()
def test_rows_past_the_last_group_are_zero_as_transformers_leaves_them():
    model = _Experts("transformers", torch.float32)
    cm = uniorch.compile(model, target="interpret")
    x, ends = torch.randn(4, K), torch.tensor([1, 1, 2, 3, 3, 3], dtype=torch.int32)  # row 3 in no group
    out = cm(x, ends)
    torch.testing.assert_close(out, model(x, ends))
    assert out[3].abs().max() == 0


@torch.no_grad()
def test_mixtral_decode_steps_compile_their_experts():
    # each decode step ran transformers' grouped matmul in PyTorch: a host read of the row ends
    # and a matmul per expert, four times per step in this two-layer model
    torch.manual_seed(0)
    config = transformers.MixtralConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                        num_experts_per_tok=2, max_position_embeddings=64)
    model = transformers.MixtralForCausalLM(config).eval()
    cm = uniorch.compile(model, target="interpret")
    ids = torch.randint(0, 96, (1, 6))
    kw = dict(max_new_tokens=3, do_sample=False, output_logits=True, return_dict_in_generate=True)
    got, want = cm.generate(ids, **kw), model.generate(ids, **kw)
    assert torch.equal(got.sequences, want.sequences)
    for a, b in zip(got.logits, want.logits):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    step = cm.explain()  # the last decode step: two rows per layer, four experts
    assert not step.fallbacks, str(step)


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
def test_a_decode_steps_grouped_matmul_builds_for_gpus(target):
    # what a GPU runs: the gathered contraction through Triton's real stages (PTX read by ptxas, HSACO)
    model = _Experts("aten", torch.bfloat16)
    x, ends = torch.randn(4, K).to(torch.bfloat16), torch.tensor([0, 1, 1, 3, 3, 4], dtype=torch.int32)
    art = uniorch.compile_aot(model, (x, ends), target=target)
    assert art.kernels and not art.fallbacks, art.fallbacks
