"""The model zoo (tests/models/*.py): every model captures to a functional graph that matches eager
PyTorch on fresh inputs, and lowers to linalg-on-tensors MLIR that re-parses with and without locations.

Each tests/models/<name>.py has `make()` returning `(model, args)` or `(model, args, kwargs)`.
"""
from __future__ import annotations

import copy
import operator
import re

import pytest
import torch

import uniorch
from uniorch import ir as uir
from uniorch.testing import zoo

MODELS_DIR = zoo.DEFAULT_DIR
MODEL_NAMES = zoo.names()
load, fresh_like, fresh_inputs = zoo.load, zoo.fresh_like, zoo.fresh_inputs


def state_of(model: torch.nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()}


def assert_no_mutation(cg: uniorch.CapturedGraph):
    for node in cg.graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        if isinstance(node.target, torch._ops.OpOverload):
            assert not node.target._schema.is_mutable, f"mutating op {node.target} survived capture ({node.name})"
        else:  # only tuple unpacking besides ATen/prims ops: no higher-order ops, no Python callables
            assert node.target is operator.getitem, f"unexpected call {node.target} in the captured graph"


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_capture_matches_eager(name):
    base_seed = torch.initial_seed()  # conftest seeds every test from the OS: new inputs each run
    model, args, kwargs = load(name)
    before = state_of(model)
    cg = uniorch.capture(model, args, kwargs)
    assert_no_mutation(cg)
    # Capturing traces with fake tensors: it must leave the real model's state alone.
    for key, value in state_of(model).items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0, msg=f"capture changed {key}")

    for seed in (base_seed, base_seed + 1):
        fargs, fkwargs = fresh_inputs(args, kwargs, seed)
        reference = copy.deepcopy(model)  # eager runs on a copy so stateful models (train BN) compare
        with torch.no_grad():
            expected = reference(*fargs, **fkwargs)
            got = cg(*fargs, **fkwargs)
        why = lambda msg: f"{msg} (inputs from seed {seed})"  # noqa: E731
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5, msg=why)
        # Buffer updates (BatchNorm running stats, num_batches_tracked) happen in both.
        torch.testing.assert_close(state_of(model), state_of(reference), rtol=1e-4, atol=1e-5, msg=why)
    if any(o.kind == "buffer_mutation" for o in cg.outputs):  # the state check above is not vacuous
        changed = [k for k, v in state_of(model).items() if not torch.equal(v, before[k])]
        assert changed, "the capture records buffer updates, but calling it changed no buffer"


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_uniorch_opt_emits_linalg_that_reparses(name, tmp_path):
    """`uniorch-opt tests/models/<name>.py:make --emit linalg`, as a user runs it (in-process)."""
    import io

    from torch_mlir import ir

    from uniorch.tools.opt import main

    out, err = tmp_path / "out.mlir", io.StringIO()
    rc = main([f"{MODELS_DIR / name}.py:make", "--emit", "linalg", "--mlir-print-debuginfo", "-o", str(out)],
              stdout=io.StringIO(), stderr=err)
    assert rc == 0, err.getvalue()
    with_locs = out.read_text()
    # nn.Sequential-style models have no forward of their own: their ops point into torch.nn's files
    assert re.search(r'loc\("[^"]+\.py":\d+:\d+\)', with_locs), "no source locations in the output"
    reparsed = uir.parse_module(with_locs, uir.make_context())
    for text in (with_locs, str(reparsed)):  # with and without locations
        module = uir.parse_module(text, uir.make_context())
        names = []

        def visit(op):
            names.append(op.name)
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
        leftover = sorted({n for n in names if n.startswith(("torch.", "torch_c."))})
        assert not leftover, f"torch-dialect ops left after lowering: {leftover}"
        assert any(n.startswith("linalg.") for n in names), "no linalg ops in the lowered module"


def test_zoo_size():
    assert len(MODEL_NAMES) >= 24, MODEL_NAMES
