"""tools/training_report.py on one small zoo model: the compiled training run is judged against
eager's, and in bf16 against torch.compile's distance from eager on the same first step."""
import math

from uniorch.tools import training_report as tr


def test_fp32_row_matches_eager():
    row = tr.run_model("mlp", "interpret", steps=2, optimizer="sgd")
    assert row["max_rel_err"] <= tr.TOLERANCE["fp32"], row
    assert row["grad_l2_err"] <= tr.TOLERANCE["fp32"], row
    assert row["bw_compiled"] == 1.0 and row["bw_kernels"] >= 1, row
    assert "inductor_grad_l2_err" not in row  # only bf16 rows compare with torch.compile


def test_bf16_row_reports_torch_compile_beside_ours():
    row = tr.run_model("mlp", "interpret", steps=1, optimizer="sgd", precision="bf16")
    assert row["grad_l2_err"] <= tr.TOLERANCE["bf16"], row
    # compiled bf16 is about as far from fp32 as eager bf16 is
    assert row["grad_l2_vs_fp32"] <= 1.5 * row["eager_grad_l2_vs_fp32"], row
    if "inductor_error" not in row:  # Inductor needs a C++ compiler on this machine
        assert math.isfinite(row["inductor_grad_l2_err"]) and row["inductor_grad_l2_err"] <= tr.TOLERANCE["bf16"], row
    md = tr.markdown([row], {"flags": "", "commit": "x", "date": "d", "target": "interpret", "steps": 1,
                             "optimizer": "sgd", "precision": "bf16"})
    assert "| torch.compile |" in md and f"{row['grad_l2_err']:.1e}" in md
