"""Random op graphs (tests/fuzz_graphs.py) compiled for the interpreter must match eager.

CI runs a bounded number of examples; `UNIORCH_FUZZ_EXAMPLES=500 pytest tests/test_fuzz.py` runs a
larger search. A failure prints the program (Hypothesis shrinks it first) and the seed.
"""
import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import uniorch
from fuzz_graphs import programs

EXAMPLES = int(os.environ.get("UNIORCH_FUZZ_EXAMPLES", "0") or 0)
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.bfloat16: dict(rtol=1e-2, atol=1e-2),
       torch.float16: dict(rtol=1e-3, atol=1e-3)}


def _check(prog, dtype=torch.float32, dynamic=None):
    inputs = prog.make_inputs()
    cm = uniorch.compile(prog, target="interpret", fallback="eager", dynamic=dynamic)
    ref = prog(*inputs)
    got = cm(*inputs)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype, (g.shape, r.shape, g.dtype, r.dtype)
        # the casts in a program round to fp16/bf16 and back, so compare at that precision
        tol = TOL[torch.bfloat16] if any(op == "cast" for op, _, _ in prog.steps) else TOL[dtype]
        torch.testing.assert_close(g, r, equal_nan=True, **tol)
    return cm


@settings(max_examples=EXAMPLES or 12, deadline=None, derandomize=not EXAMPLES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_graphs_match_eager(prog):
    _check(prog)


@settings(max_examples=max(3, EXAMPLES // 4) if EXAMPLES else 3, deadline=None, derandomize=not EXAMPLES,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_steps=4, float_dtypes=(torch.bfloat16, torch.float16)))
def test_random_half_precision_graphs_match_eager(prog):
    _check(prog, prog.input_dtypes[0])


@settings(max_examples=max(4, EXAMPLES // 4) if EXAMPLES else 6, deadline=None, derandomize=not EXAMPLES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_graphs_with_symbolic_sizes_match_eager(prog):
    """Every size of at least 2 symbolic (what the program's own shapes do not fix): kernels
    reading their sizes as arguments give eager's values."""
    _check(prog, dynamic=True)
