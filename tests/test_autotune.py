"""Contraction tile configurations chosen by measurement (uniorch/runtime/autotune.py). On a GPU it is
UNIORCH_AUTOTUNE=1; here `force` runs the same machinery on the interpreter: every candidate is
generated and compiled, each must compute what eager computes, the fastest is kept and cached on
disk, and a later compile reads the cache instead of measuring again."""
import json
import os

import pytest
import torch

import uniorch
from uniorch.runtime import autotune

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


@pytest.fixture
def tuning(tmp_path, monkeypatch):
    monkeypatch.setenv("UNIORCH_AUTOTUNE", "force")
    monkeypatch.setenv("UNIORCH_CACHE_DIR", str(tmp_path))
    return tmp_path


def _launchers(cm):
    entry = next(iter(cm._cache.values()))
    return [k.fn for region in entry.program.regions for k in region.plan.kernels.values()
            if isinstance(k.fn, autotune.AutotunedLauncher)]


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_every_candidate_computes_what_eager_does(tuning, dtype, tol):
    torch.manual_seed(0)
    model = torch.nn.Linear(96, 200).to(dtype).requires_grad_(False)  # inference: one plan
    x = torch.randn(130, 96, dtype=dtype)
    cm = uniorch.compile(model, target="interpret")
    out = cm(x)
    ref = model(x)
    assert ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item() <= tol
    (tuner,) = _launchers(cm)
    assert len(tuner.cands) >= 3, tuner.cands
    assert all(isinstance(t, float) for t in tuner.timings.values()), tuner.timings  # each one ran
    # each candidate in turn as the plan's launcher, on fresh inputs: eager's numbers
    x2 = torch.randn(130, 96, dtype=dtype) * 2 + 0.5
    want = model(x2).float()
    for cfg, ks in tuner.cands:
        tuner.chosen = tuner._load(ks)
        got = cm(x2).float()
        assert ((got - want).abs().max() / want.abs().max()).item() <= tol, cfg


def test_the_choice_is_cached_on_disk(tuning, monkeypatch):
    torch.manual_seed(1)
    model = torch.nn.Linear(64, 96).requires_grad_(False)
    x = torch.randn(70, 64)
    uniorch.compile(model, target="interpret")(x)
    cache = json.loads((tuning / "autotune.json").read_text())
    assert len(cache) == 1 and len(next(iter(cache.values()))) == 5, cache
    calls = []
    monkeypatch.setattr(autotune, "measure", lambda *a, **k: calls.append(a) or 1.0)
    cm = uniorch.compile(model, target="interpret")
    torch.testing.assert_close(cm(x), model(x), rtol=1e-5, atol=1e-5)
    assert calls == [], "a cached choice was measured again"
    (tuner,) = _launchers(cm)
    assert tuner.chosen is not None
    (report,) = autotune.choices(cm).values()  # the cached choice is reported as chosen
    assert report["chosen"] == next(iter(cache.values())) and report["seconds"] == {}


def test_off_by_default_and_on_cpu_targets(monkeypatch):
    from uniorch.targets import parse_target

    monkeypatch.delenv("UNIORCH_AUTOTUNE", raising=False)
    assert not autotune.enabled(parse_target("interpret"))
    monkeypatch.setenv("UNIORCH_AUTOTUNE", "1")
    assert not autotune.enabled(parse_target("interpret"))
    assert not autotune.enabled(parse_target("cpu"))
    assert autotune.enabled(parse_target("cuda:sm_90"))
