"""Every zoo model through uniorch.compile(target="interpret"): matches eager on fresh inputs, and
at least 90 % of its captured ATen ops run inside compiled regions (explain's figure)."""
from __future__ import annotations

import copy

import pytest
import torch

import uniorch

from test_models import MODEL_NAMES, fresh_inputs, load, state_of


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_compiled_model_matches_eager(name):
    model, args, kwargs = load(name)
    reference = copy.deepcopy(model)
    cm = uniorch.compile(model, target="interpret")
    rep = cm.explain(*args, **kwargs)
    fargs, fkwargs = fresh_inputs(args, kwargs, torch.initial_seed())
    with torch.no_grad():
        expected = reference(*fargs, **fkwargs)
        got = cm(*fargs, **fkwargs)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(state_of(model), state_of(reference), rtol=1e-4, atol=1e-5)
    assert rep.compiled_fraction >= 0.9, str(rep)
    assert not any(f.stage == "launch" for f in rep.fallbacks), str(rep)  # a kernel bug, not a gap
