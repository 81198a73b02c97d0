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


def _check(prog, dtype=torch.float32):
    inputs = prog.make_inputs()
    cm = uniorch.compile(prog, target="interpret", fallback="eager")
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
