"""The static kernel report (tools/kernel_report.py): every zoo model within its ceilings in
docs/perf/ceilings.json, the check failing when a ceiling is below today's value, and the float64
detector on graphs built for it.

fp32 runs the whole zoo (about a minute: capture and codegen, no kernel launched); bf16 a few
models, and the whole zoo with `UNIORCH_SLOW_TESTS=1`.
"""
from __future__ import annotations

import json
import math

import pytest
import torch

from uniorch import config
from uniorch.api import explain_static
from uniorch.testing import zoo
from uniorch.tools import kernel_report as kr

BF16_SUBSET = ["mlp", "attention_manual", "cnn_bn_eval", "mlp_residual_tanh", "rotary_partial"]


def _ceilings() -> dict:
    return json.loads(kr.CEILINGS.read_text())


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_zoo_within_ceilings(dtype):
    models = kr.names() if dtype == "fp32" or config.flag("UNIORCH_SLOW_TESTS") else BF16_SUBSET
    rows = kr.measure_all(models, [dtype])
    bad, unbounded = kr.check(rows, _ceilings())
    assert not unbounded, (f"no ceiling for {unbounded}: run python -m uniorch.tools.kernel_report "
                           f"--update-ceilings and commit docs/perf/ceilings.json")
    assert not bad, "kernel report regressed:\n" + "\n".join(bad)
    # float64 arithmetic in an fp32/bf16 model is a bug (eager computes in fp32 opmath)
    assert not [(r["model"], r["f64_names"]) for r in rows if r.get("f64_kernels")]


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_attention_probes_one_kernel(dtype):
    """Causal attention at B=1, H=2, T=256, d=16 (SDPA, written out, grouped-query): one kernel,
    at most 1.5x the bytes of q, k, v and the output (the T x T scores never stored)."""
    for r in kr.measure_all(list(kr.PROBES), [dtype]):
        assert "error" not in r, r
        assert r["kernels"] == 1 and r["kinds"] == {"attention": 1}, r
        assert r["ratio"] <= 1.5, r


def test_check_fails_below_current_value(tmp_path, capsys):
    row = kr.measure("mlp", "fp32")
    ceilings = kr.new_ceilings([row], {})
    path = tmp_path / "ceilings.json"
    path.write_text(json.dumps(ceilings))
    assert kr.main(["--models", "mlp", "--dtypes", "fp32", "--jobs", "1", "--check", str(path)]) == 0

    ceilings["fp32"]["mlp"].update(kernels=row["kernels"] - 1, ratio=math.floor(row["ratio"] * 90) / 100)
    path.write_text(json.dumps(ceilings))
    assert kr.main(["--models", "mlp", "--dtypes", "fp32", "--jobs", "1", "--check", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"mlp [fp32]: kernels {row['kernels']} > ceiling {row['kernels'] - 1}" in err
    assert "mlp [fp32]: ratio" in err


def test_update_ceilings_rounds_ratio_up(tmp_path):
    row = {"model": "m", "dtype": "fp32", "kernels": 3, "ratio": 1.5, "f64_kernels": 0, "fallbacks": 0}
    got = kr.new_ceilings([row], {"bf16": {"m": {"kernels": 9}}})
    assert got["fp32"]["m"] == {"kernels": 3, "ratio": 1.58, "f64_kernels": 0, "fallbacks": 0}
    assert got["bf16"]["m"] == {"kernels": 9}  # not measured: kept


class _Mixed(torch.nn.Module):
    """fp32 model with one explicit float64 computation in the middle, and an fp32-only kernel."""

    def forward(self, x):
        y = torch.tanh(x) + 1
        z = (y.double() * 2).sqrt().float()
        return torch.relu(z @ x.t()), x.exp().sum(0)


class _ScaledFp32(torch.nn.Module):
    """fp32 only, but divides by a Python float: torch-mlir writes an f64 constant truncated to f32."""

    def forward(self, x):
        return torch.softmax(x @ x.t() / math.sqrt(8.0), -1)


def test_f64_detector_counts_float64_arithmetic():
    x = torch.randn(8, 8)
    s = kr.summarize(explain_static(_Mixed(), (x,)))
    assert s["f64_kernels"] >= 1, s
    assert s["f64_kernels"] < s["kernels"], "the fp32-only kernels must not count"


def test_f64_detector_ignores_folded_constants_and_float64_models():
    assert kr.summarize(explain_static(_ScaledFp32(), (torch.randn(8, 8),)))["f64_kernels"] == 0
    rep = explain_static(_Mixed(), (torch.randn(8, 8, dtype=torch.float64),))
    assert kr.summarize(rep, float64_model=True)["f64_kernels"] is None


def test_static_report_matches_explain():
    """The report's numbers are those `explain` gives after launching each kernel once."""
    import uniorch

    model, args, kwargs = zoo.load("rotary_partial")
    static = explain_static(model, args, kwargs)
    launched = uniorch.explain(model, *args, target="interpret", **kwargs)
    assert "first launch" not in " ".join(static.timings) and "first launch" in " ".join(launched.timings)
    assert [(k.name, k.bytes_read, k.bytes_written, k.compute_types) for k in static.kernels] == \
        [(k.name, k.bytes_read, k.bytes_written, k.compute_types) for k in launched.kernels]
    assert (static.bytes_moved, static.bytes_minimum, len(static.fallbacks)) == \
        (launched.bytes_moved, launched.bytes_minimum, len(launched.fallbacks))
