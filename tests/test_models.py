"""The model zoo (tests/models/*.py): every model captures to a functional graph that matches eager
PyTorch on fresh inputs, and lowers to linalg-on-tensors MLIR that re-parses with and without locations.

Each tests/models/<name>.py has `make()` returning `(model, args)` or `(model, args, kwargs)`.
"""
from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import pytest
import torch
import torch.utils._pytree as pytree

import uniorch
from uniorch import ir as uir

MODELS_DIR = Path(__file__).parent / "models"
MODEL_NAMES = sorted(p.stem for p in MODELS_DIR.glob("*.py") if not p.stem.startswith("_"))


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"uniorch_zoo_{name}", MODELS_DIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    made = mod.make()
    model, args = made[0], tuple(made[1])
    kwargs = dict(made[2]) if len(made) > 2 and made[2] is not None else {}
    return model, args, kwargs


def fresh_like(value, gen: torch.Generator):
    """A new random value with the example's shape and dtype; non-tensors (captured as constants) stay."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.dtype == torch.bool:
        # Keep at least one True per row so masks never hide a whole row (softmax over nothing is NaN).
        out = torch.rand(value.shape, generator=gen) < 0.7
        if out.dim() > 0 and out.numel() > 0:
            out[..., 0] = True
        return out
    if value.is_floating_point():
        return torch.randn(value.shape, generator=gen, dtype=value.dtype)
    lo, hi = int(value.min()), int(value.max()) + 1 if value.numel() else 1
    return torch.randint(lo, hi, value.shape, generator=gen, dtype=value.dtype)


def fresh_inputs(args, kwargs, seed: int):
    gen = torch.Generator().manual_seed(seed)
    return pytree.tree_map(lambda v: fresh_like(v, gen), (args, kwargs))


def state_of(model: torch.nn.Module) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict(keep_vars=True).items()}


def assert_no_mutation(cg: uniorch.CapturedGraph):
    for node in cg.graph_module.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            assert not node.target._schema.is_mutable, f"mutating op {node.target} survived capture ({node.name})"


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_capture_matches_eager(name):
    model, args, kwargs = load(name)
    before = state_of(model)
    cg = uniorch.capture(model, args, kwargs)
    assert_no_mutation(cg)
    # Capturing traces with fake tensors: it must leave the real model's state alone.
    for key, value in state_of(model).items():
        torch.testing.assert_close(value, before[key], rtol=0, atol=0, msg=f"capture changed {key}")

    for seed in (1, 2):
        fargs, fkwargs = fresh_inputs(args, kwargs, seed)
        reference = copy.deepcopy(model)  # eager runs on a copy so stateful models (train BN) compare
        with torch.no_grad():
            expected = reference(*fargs, **fkwargs)
            got = cg(*fargs, **fkwargs)
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5, equal_nan=True)
        # Buffer updates (BatchNorm running stats, num_batches_tracked) happen in both.
        torch.testing.assert_close(state_of(model), state_of(reference), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_lowers_to_linalg(name):
    from torch_mlir import ir

    model, args, kwargs = load(name)
    module = uniorch.to_mlir(model, args, kwargs, stage="linalg")
    for text in (str(module), module.operation.get_asm(enable_debug_info=True)):
        reparsed = uir.parse_module(text, uir.make_context())
        names = []

        def visit(op):
            names.append(op.name)
            return ir.WalkResult.ADVANCE

        reparsed.operation.walk(visit)
        leftover = sorted({n for n in names if n.startswith(("torch.", "torch_c."))})
        assert not leftover, f"torch-dialect ops left after lowering: {leftover}"
        assert any(n.startswith("linalg.") for n in names), "no linalg ops in the lowered module"
