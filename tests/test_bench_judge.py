"""The benchmark's correctness rule for a backend outside eager's tolerance (tools/bench/runner.py):
it is judged against a float64 run of the same weights and inputs, as Inductor's accuracy checker
does. Outputs built by hand: one closer to float64 than eager is passes, a wrong one does not."""
from types import SimpleNamespace

import torch

from uniorch.tools.bench import runner


def _case(kind="block"):
    torch.manual_seed(0)
    fn = torch.nn.Linear(64, 32)
    x = torch.randn(16, 64)
    w = SimpleNamespace(kind=kind)
    opt = SimpleNamespace(device="cpu")
    with torch.no_grad():
        ref = fn(x)
        exact = fn.double()(x.double()).float()
    fn.float()
    return w, fn, (x,), ref, exact, opt


def test_closer_to_float64_than_eager_is_correct():
    w, fn, args, ref, exact, opt = _case()
    row = {"checks": {"b": False}, "errors": {}}
    runner._judge_fp64(w, fn, args, ref, {"b": exact}, "fp32", opt, row)
    assert row["checks"]["b"] is True and row["fp64_rule"]["b"]["err_vs_fp64"] <= row["fp64_rule"]["b"]["eager_vs_fp64"]


def test_wrong_output_stays_wrong():
    w, fn, args, ref, exact, opt = _case()
    row = {"checks": {"b": False}, "errors": {}}
    runner._judge_fp64(w, fn, args, ref, {"b": exact + 0.01 * exact.abs().max()}, "fp32", opt, row)
    assert row["checks"]["b"] is False


def test_training_step_gradients_against_float64():
    from uniorch.tools.bench import training

    w, fn, args, _, _, opt = _case("train")
    ref = training.TrainStep("eager", fn, "cpu")(*args)
    exact = [g.float() for g in training.TrainStep("eager", fn.double(), "cpu")(args[0].double())]
    fn.float()
    row = {"checks": {"b": False}, "errors": {}}
    runner._judge_fp64(w, fn, args, ref, {"b": exact}, "fp32", opt, row)
    assert row["checks"]["b"] is True, row
    bad = [g + 0.05 * g.abs().max() for g in exact]
    row = {"checks": {"b": False}, "errors": {}}
    runner._judge_fp64(w, fn, args, ref, {"b": bad}, "fp32", opt, row)
    assert row["checks"]["b"] is False, row
