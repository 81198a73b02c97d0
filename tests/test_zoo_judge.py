"""The zoo's judge (uniorch.testing.zoo.judge), on outputs built by hand: within tolerance of eager
is correct; otherwise no further from a float64 run than eager is. Integer outputs (top-k indices)
count by the fraction of elements that differ from float64's, so a tie broken differently at
16-bit precision is not a wrong answer, while a wrong index with a wrong value is."""
import torch

from uniorch.testing import zoo


def _topk_case():
    # two items tie at bf16 precision (1.0 and 1.0 + 2**-10); float64 ranks the second first
    scores64 = torch.tensor([[1.0, 1.0 + 2 ** -10, 0.25, -0.5]], dtype=torch.float64)
    scores16 = scores64.to(torch.bfloat16)
    assert scores16[0, 0] == scores16[0, 1]
    ref64 = {"values": scores64.topk(1).values, "indices": scores64.topk(1).indices}
    eager = {"values": scores16[:, :1].clone(), "indices": torch.tensor([[0]])}  # eager's tie-break
    return scores16, eager, ref64


def test_integer_mismatch_fails_the_eager_rule_and_names_the_output():
    _, eager, _ = _topk_case()
    got = {"values": eager["values"].clone(), "indices": torch.tensor([[1]])}
    v = zoo.judge(got, eager, torch.bfloat16)
    assert not v["correct"] and any("indices" in line and "1 of 1" in line for line in v["outputs"]), v


def test_tie_broken_the_other_way_is_correct_under_float64():
    scores16, eager, ref64 = _topk_case()
    got = {"values": scores16[:, 1:2].clone(), "indices": torch.tensor([[1]])}  # the other tied item
    v = zoo.judge(got, eager, torch.bfloat16, reference64=ref64)
    assert v["rule"] == "fp64" and v["correct"], v


def test_wrong_index_with_wrong_value_stays_wrong():
    scores16, eager, ref64 = _topk_case()
    got = {"values": scores16[:, 2:3].clone(), "indices": torch.tensor([[2]])}  # not a tie: 0.25
    v = zoo.judge(got, eager, torch.bfloat16, reference64=ref64)
    assert not v["correct"], v


def test_indices_must_match_float64_where_eager_does():
    ref64 = {"indices": torch.tensor([3, 1, 2])}
    eager = {"indices": torch.tensor([3, 1, 2])}
    got = {"indices": torch.tensor([3, 2, 1])}
    v = zoo.judge(got, eager, torch.float32, reference64=ref64)
    assert not v["correct"], v


def test_nan_or_shape_mismatch_is_never_judged_by_float64():
    eager = {"x": torch.ones(3)}
    assert not zoo.comparable({"x": torch.tensor([1.0, float("nan"), 1.0])}, eager)
    assert not zoo.comparable({"x": torch.ones(4)}, eager)
    assert zoo.comparable({"x": torch.ones(3) * 2}, eager)
