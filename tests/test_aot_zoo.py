"""Zoo models compiled ahead of time for the interpreter, saved, loaded back and run: the bundle
path on real models (capture-issue zoo), against eager on fresh inputs. tests/test_aot.py covers
the fresh-process, no-recompile and bad-bundle cases on small models.

A subset runs in CI; `UNIORCH_SLOW_TESTS=1` runs every model.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.utils._pytree as pytree

import uniorch
from test_models import MODEL_NAMES, load
from uniorch import config

CI_SUBSET = {"mlp", "rotary_partial"}
PARAMS = [
    pytest.param(name, marks=pytest.mark.skipif(
        not config.flag("UNIORCH_SLOW_TESTS") and name not in CI_SUBSET,
        reason="AOT for the whole zoo takes minutes on the interpreter; run it with UNIORCH_SLOW_TESTS=1"))
    for name in MODEL_NAMES
]


def _fresh(tree):
    return pytree.tree_map(
        lambda a: torch.randn_like(a) if isinstance(a, torch.Tensor) and a.is_floating_point() else a, tree)


@pytest.mark.parametrize("name", PARAMS)
def test_zoo_bundle_reloads_and_runs(name, tmp_path):
    model, args, kwargs = load(name)
    reference = copy.deepcopy(model)  # train-mode models update buffers: keep eager's own copy
    art = uniorch.compile_aot(model, args, target="interpret", kwargs=kwargs)
    fn = uniorch.load(art.save(str(tmp_path / name)), model=model)
    fargs, fkwargs = _fresh((args, kwargs))
    with torch.no_grad():
        want = reference(*fargs, **fkwargs)
        got = fn(*fargs, **fkwargs)
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want)):
        if isinstance(w, torch.Tensor) and w.is_floating_point():
            err = float((g - w).abs().max() / (w.abs().max() + 1e-12))
            assert err <= 1e-4, f"{name}: relative error {err:.2e}"
        elif isinstance(w, torch.Tensor):
            assert torch.equal(g, w)
