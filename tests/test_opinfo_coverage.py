"""PyTorch's OpInfo database through uniorch (a CI-sized slice of `uniorch.tools.opinfo_coverage`):
no sample may be a silent mismatch, and common ops must compile with nothing left to PyTorch."""
import pytest
import torch

pytest.importorskip("expecttest")  # OpInfo's module needs it; the test extra installs it

from uniorch.tools import opinfo_coverage as cov  # noqa: E402

# a spread over kinds: pointwise, reductions, norms, matmuls, views, indexing, sort, scans, random
MUST_COMPILE = ["add", "mul", "abs", "exp", "sigmoid", "where", "clamp", "sum", "mean", "amax", "var",
                "softmax", "log_softmax", "nn.functional.layer_norm", "nn.functional.gelu", "matmul", "bmm",
                "addmm", "transpose", "permute", "reshape", "cat", "stack", "narrow", "gather", "index_select",
                "topk", "sort", "cumsum", "nn.functional.conv2d", "nn.functional.embedding_bag", "tril",
                "flip", "roll", "full_like"]


@pytest.fixture(scope="module")
def results():
    names = MUST_COMPILE + ["linalg.ldl_factor_ex", "empty", "bernoulli"]
    return cov.run(torch.float32, 1, names, log=open("/dev/null", "w"))


def test_no_sample_is_a_silent_mismatch(results):
    bad = [(r.op, r.reason) for r in results if r.cls in ("MISMATCH", "error")]
    assert not bad, bad


def test_common_ops_compile_fully(results):
    by_op = {r.op: r for r in results}
    missing = [n for n in MUST_COMPILE if n not in by_op]
    assert not missing, f"no float32 sample ran for {missing}"
    partial = {n: (by_op[n].cls, by_op[n].reason) for n in MUST_COMPILE if by_op[n].cls != "compiled"}
    assert not partial, partial


def test_eager_and_random_ops_are_classified(results):
    by_op = {r.op: r for r in results}
    ldl = by_op["linalg.ldl_factor_ex"]
    assert ldl.cls == "eager" and "ldl_factor" in ldl.reason, ldl
    assert by_op["empty"].cls == "random" and by_op["bernoulli"].cls == "random"
    table = cov.table(results, torch.float32, 1)
    assert "| linalg.ldl_factor_ex |" in table and "random ops (shape-compared) included" in table


def test_tied_indices_are_compared_by_the_values_they_name():
    x = torch.tensor([[3.0, 1.0, 3.0, 2.0]])
    ref = torch.sort(x, descending=True)
    other = torch.return_types.sort((ref.values, ref.indices[:, [1, 0, 2, 3]]))  # the two 3.0s swapped
    assert not torch.equal(other.indices, ref.indices)
    assert cov._ties_only("sort", x, other, ref, torch.float32)
    wrong = torch.return_types.sort((ref.values, ref.indices[:, [0, 2, 1, 3]]))  # names 2.0 where 1.0 is
    assert not cov._ties_only("sort", x, wrong, ref, torch.float32)
    # argmax promises the first occurrence: a tie is not an excuse there
    assert not cov._ties_only("argmax", x, torch.tensor(2), torch.tensor(0), torch.float32)


# ops whose answers on NaN, ±inf and -0.0 PyTorch defines: the extremes, clamps and the activations
# made of them, sorts, NaN-aware reductions, softmax, rounding, remainders
NONFINITE = ["clamp", "clamp_min", "clamp_max", "nn.functional.hardtanh", "nn.functional.relu6",
             "nn.functional.hardsigmoid", "nn.functional.hardswish", "nn.functional.relu", "nn.functional.threshold",
             "nn.functional.leaky_relu", "nn.functional.elu", "nn.functional.softplus", "nn.functional.silu",
             "maximum", "minimum", "max.binary", "min.binary", "fmax", "fmin", "amax", "amin",
             "max.reduction_with_dim", "min.reduction_with_dim", "argmax", "argmin", "cummax", "cummin", "sort",
             "topk", "median", "nanmedian", "where", "nan_to_num", "nansum", "nanmean", "sum", "prod", "mean",
             "var", "linalg.vector_norm", "cumsum", "logcumsumexp", "softmax", "log_softmax", "logsumexp",
             "sign", "round", "trunc", "floor_divide", "remainder", "fmod", "xlogy", "sigmoid", "tanh", "cdist"]


# where the cpu target's lowering (through LLVM) and the interpreter's (Triton) can differ: selects
# and compares, which decide what a NaN becomes (the rest is the same arithmetic on both)
NONFINITE_CPU = ["clamp", "clamp_min", "clamp_max", "nn.functional.hardtanh", "nn.functional.relu6",
                 "nn.functional.hardsigmoid", "nn.functional.relu", "nn.functional.threshold", "maximum", "minimum",
                 "fmax", "fmin", "amax", "amin", "argmax", "sort", "topk", "where", "nan_to_num", "softmax", "sign"]


@pytest.mark.parametrize("target", ["interpret", "cpu"])
def test_non_finite_inputs_follow_eager(target):
    """The ops with NaN, inf, -inf and -0.0 in their input, on the interpreter and on the cpu target
    (whose lowering through LLVM turned clamp's NaN into the bound while the interpreter kept it):
    every answer eager's, NaN where eager has NaN."""
    names = NONFINITE if target == "interpret" else NONFINITE_CPU
    results = cov.run(torch.float32, 1, names, log=open("/dev/null", "w"), nonfinite=True, target=target)
    ran = {r.op.split(".")[0] for r in results}
    assert {n.split(".")[0] for n in names} <= ran, sorted({n.split(".")[0] for n in names} - ran)
    bad = [(r.op, r.reason) for r in results if r.cls in ("MISMATCH", "error")]
    assert not bad, bad
