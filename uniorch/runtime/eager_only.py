"""ATen ops uniorch knowingly leaves to PyTorch, with why: lowerings that are numerically wrong
on inputs PyTorch handles. Each runs eagerly from the start and `explain` reports the reason;
a fix (a stable decomposition or a kernel) removes the op from this table."""
from __future__ import annotations

import torch

aten = torch.ops.aten

EAGER_ONLY = {
    # torch-mlir lowers it as log(cumsum(exp(x))): exp overflows to inf for inputs PyTorch's
    # stable scan handles (|x| > ~88 in fp32); a max-shifted form underflows early prefixes instead
    aten.logcumsumexp.default: "torch-mlir's lowering (log of a cumsum of exp) overflows where PyTorch's "
                               "stable scan does not; runs in PyTorch",
}


def reason(target) -> str:
    return EAGER_ONLY.get(target, "")
