"""Norms and variances of fp32 (and 16-bit) models compute in fp32, never f64, and match eager.

torch-mlir's variance lowering upcast to f64 and its `x == -inf` (SDPA's safe softmax) widened the
scores to f64: every LayerNorm, GroupNorm, training BatchNorm and attention kernel did f64
arithmetic (uniorch/capture/statistics.py, passes/narrow_compares.py). Inputs here sit far from
zero (mean 300, spread 1), where a naive sum-of-squares variance loses every digit in fp32.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import uniorch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


def _offset(*shape):
    return torch.randn(*shape) + 300.0


class _Stats(nn.Module):
    def forward(self, x):
        v, m = torch.var_mean(x, -1, correction=0, keepdim=True)
        s, m2 = torch.std_mean(x, (0, 2))
        return v, m, s, m2, torch.var(x, 1), torch.std(x, correction=2), torch.var(x[:1, :1, :1], 2)


CASES = {
    "layer_norm": lambda: (nn.Sequential(nn.Linear(48, 48), nn.GELU(), nn.LayerNorm(48)), (torch.randn(6, 48),)),
    "layer_norm_offset": lambda: (nn.LayerNorm(64), (_offset(5, 64),)),
    "group_norm": lambda: (nn.GroupNorm(4, 16), (_offset(2, 16, 5, 5),)),
    "batch_norm_train": lambda: (nn.BatchNorm2d(8).train(), (_offset(4, 8, 6, 6),)),
    "var_std": lambda: (_Stats(), (_offset(3, 5, 33),)),
    "sdpa_causal": lambda: (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                            tuple(torch.randn(1, 2, 8, 16) for _ in range(3))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fp32_models_have_no_f64_kernels(name):
    model, args = CASES[name]()
    ref_model = model
    if isinstance(model, nn.Module):
        import copy
        ref_model = copy.deepcopy(model)  # training BatchNorm updates its running statistics
    cm = uniorch.compile(model, target="interpret")
    got = cm(*args)
    want = ref_model(*args)
    rep = cm.explain(*args)
    assert not rep.fallbacks, rep.fallbacks
    wide = [k.name for k in rep.kernels if "float64" in k.source or "f64" in str(k.ops)]
    assert not wide, f"f64 arithmetic in {wide}"
    for g, w in zip(*(x if isinstance(x, tuple) else (x,) for x in (got, want))):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4, equal_nan=True)
    if name == "batch_norm_train":
        torch.testing.assert_close(model.running_var, ref_model.running_var, rtol=1e-4, atol=1e-5)


def test_bf16_layer_norm_in_fp32():
    torch.manual_seed(0)
    ln = nn.LayerNorm(96).to(torch.bfloat16)
    x = (torch.randn(4, 96) * 3 + 40).to(torch.bfloat16)
    cm = uniorch.compile(ln, target="interpret")
    out = cm(x)
    rep = cm.explain(x)
    assert not any("float64" in k.source for k in rep.kernels)
    ref64 = F.layer_norm(x.double(), (96,), ln.weight.double(), ln.bias.double())
    eager = ln(x)
    # no further from float64 than eager's own bf16 result (both round once)
    assert (out.double() - ref64).abs().max() <= (eager.double() - ref64).abs().max() + 1e-2


LONG_ROWS = {  # rows longer than a block (4096 fp32): swept in chunks, the last one partial
    "layer_norm": lambda: (nn.LayerNorm(6000), (_offset(3, 6000),)),
    "var_mean": lambda: (lambda x: torch.var_mean(x, -1), (_offset(2, 5000) * 0.5,)),
    "group_norm": lambda: (nn.GroupNorm(2, 8), (_offset(2, 8, 40, 41),)),
    "batch_norm_train": lambda: (nn.BatchNorm2d(3).train(), (_offset(4, 3, 40, 33),)),
}


@pytest.mark.parametrize("name", sorted(LONG_ROWS))
def test_long_rows_sum_deviations_in_one_sweep(name):
    """A row swept in chunks is read once for its statistics: the sums of deviations from the mean
    ride on the sweep that sums the row (Welford's merge per chunk, codegen/welford.py), then once
    more to normalise. No further from float64 than eager (rows centred at 300, spread 1)."""
    torch.manual_seed(1)
    model, args = LONG_ROWS[name]()
    cm = uniorch.compile(model, target="interpret")
    rep = cm.explain(*args)
    assert not rep.fallbacks, rep.fallbacks
    stats = [k for k in rep.kernels if k.kind == "reduction"]
    assert stats and all(k.source.count("for r_start") <= 2 for k in stats), [k.source for k in stats]
    assert any("Welford" in k.source for k in stats)
    got = cm(*args)
    want = model(*args)
    model64 = model
    if isinstance(model, nn.Module):
        import copy
        model64 = copy.deepcopy(model).double()
    ref = model64(*(a.double() for a in args))
    for g, w, r in zip(*(x if isinstance(x, tuple) else (x,) for x in (got, want, ref))):
        err, eager_err = (g.double() - r).abs().max().item(), (w.double() - r).abs().max().item()
        assert err <= 2 * eager_err + 1e-5 * r.abs().max().item(), (err, eager_err)
