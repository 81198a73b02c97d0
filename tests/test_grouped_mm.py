"""A mixture of experts' grouped matmul (capture/grouped_mm.py): transformers' custom op and
aten._grouped_mm compile, a decode step's rows as a gathered batched matmul and a prefill's in tiles
of one expert each, against eager on fresh inputs with random routing (empty groups, all rows in
one expert, rows past the last group)."""
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
def test_a_grouped_matmul_compiles_for_decode_steps_and_prefills(op, dtype):
    g = torch.Generator().manual_seed(3)
    model = _Experts(op, dtype)
    cm = uniorch.compile(model, target="interpret")
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    # up to E rows: one expert matrix per row; more: tiles of 16 rows (200 rows: 16 too, 200 // 12)
    for rows in (1, 4, E, 3, 2 * E, 37, 200):
        x = torch.randn(rows, K, generator=g).to(dtype)
        ends = _ends(rows, g)
        torch.testing.assert_close(cm(x, ends), model(x, ends), **tol)
        rep = cm.explain(x, ends)
        assert not rep.fallbacks and rep.kernels, str(rep)
        assert any(k.kind == "contraction" for k in rep.kernels), str(rep)


class _TransposedExperts(nn.Module):
    """transformers' MoE experts: weights stored (experts, out, in), transposed for grouped_mm."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(E, N, K))

    def forward(self, x, ends):
        return torch.ops.transformers.grouped_mm_fallback(x, self.weight.transpose(-2, -1), ends)


@pytest.mark.parametrize("rows", [2, E, 37])
@torch.no_grad()
def test_transposed_expert_weights_are_read_in_place(rows):
    # the gathered batched matmul of a few rows reads each row's expert matrix by index: from the
    # transposed copy, which a kernel of its own wrote every call (Mixtral's experts: 0.39 of its
    # 1.03 MB); passes/compose_gathers.py now reads the weights themselves at transposed indices
    g = torch.Generator().manual_seed(5)
    model = _TransposedExperts()
    cm = uniorch.compile(model, target="interpret")
    for _ in range(2):
        x = torch.randn(rows, K, generator=g)
        ends = _ends(rows, g)
        torch.testing.assert_close(cm(x, ends), model(x, ends), rtol=1e-5, atol=1e-5)
    rep = cm.explain(x, ends)
    assert not rep.fallbacks, str(rep)
    weight = model.weight.numel() * 4
    assert not [k for k in rep.kernels if k.kind != "contraction" and k.bytes_written >= weight], str(rep)


@pytest.mark.parametrize("ends", [[0, 0, 0, 0, 0, 300], [300] * E, [0, 299, 299, 300, 300, 300],
                                  [1, 2, 3, 4, 5, 300], [40, 80, 120, 160, 200, 240]])
@torch.no_grad()
def test_a_prefill_routed_unevenly_matches_eager(ends):
    # every row in the last expert, in the first, one row in some, rows past the last group (zero);
    # 300 rows make tiles of 16 rows: groups of 1 to 300 rows, cut at tile and group edges
    model = _Experts("transformers", torch.float32)
    cm = uniorch.compile(model, target="interpret")
    x, ends = torch.randn(300, K), torch.tensor(ends, dtype=torch.int32)
    out = cm(x, ends)
    torch.testing.assert_close(out, model(x, ends), rtol=1e-5, atol=1e-5)
    assert out[int(ends[-1]):].abs().sum() == 0
    assert not cm.explain(x, ends).fallbacks


@torch.no_grad()
def test_a_symbolic_row_count_compiles_once():
    # a prefill of each prompt length: the row count symbolic, tiles of 64 rows, cdiv(rows, 64) + E
    # of them (a size computed by floor division)
    model = _Experts("transformers", torch.float32)
    cm = uniorch.compile(model, target="interpret", fallback="error")
    g = torch.Generator().manual_seed(5)
    for rows in (40, 130, 9):
        x = torch.randn(rows, K, generator=g)
        torch._dynamo.mark_dynamic(x, 0)
        ends = _ends(rows, g)
        torch.testing.assert_close(cm(x, ends), model(x, ends), rtol=1e-5, atol=1e-5)
    assert cm.cache_size == 1 and cm.explain(x, ends).symbolic


def test_tile_rows_grow_with_the_mean_group():
    from uniorch.capture.grouped_mm import block_rows

    assert [block_rows(rows, 8) for rows in (9, 255, 256, 1024, 2048, 1 << 20)] == [16, 16, 16, 64, 128, 128]


@torch.no_grad()
def test_rows_past_the_last_group_are_zero_as_transformers_leaves_them():
    model = _Experts("transformers", torch.float32)
    cm = uniorch.compile(model, target="interpret")
    x, ends = torch.randn(4, K), torch.tensor([1, 1, 2, 3, 3, 3], dtype=torch.int32)  # row 3 in no group
    out = cm(x, ends)
    torch.testing.assert_close(out, model(x, ends))
    assert out[3].abs().max() == 0


@torch.no_grad()
def test_mixtral_generate_compiles_its_experts():
    # the prefill and each decode step ran transformers' grouped matmul in PyTorch: a host read of
    # the row ends and a matmul per expert, four times per call in this two-layer model
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
    prefill = cm.explain(ids)  # twelve rows per layer
    assert not prefill.fallbacks and prefill.compiled_ops == prefill.captured_ops, str(prefill)


@pytest.mark.parametrize("target", ["cuda:sm_90", "rocm:gfx942"])
@pytest.mark.parametrize("rows", [4, 64])
def test_a_grouped_matmul_builds_for_gpus(target, rows):
    # what a GPU runs: the gathered contraction through Triton's real stages (PTX read by ptxas,
    # HSACO), for a decode step and a prefill's tiles
    model = _Experts("aten", torch.bfloat16)
    x, ends = torch.randn(rows, K).to(torch.bfloat16), _ends(rows, torch.Generator().manual_seed(0))
    art = uniorch.compile_aot(model, (x, ends), target=target)
    assert art.kernels and not art.fallbacks, art.fallbacks
