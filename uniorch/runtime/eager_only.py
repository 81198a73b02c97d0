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


# (op, predicate on its first input's dtype): lowerings that kill the process (a signal inside
# torch-mlir, no error to catch), found by the int64 OpInfo run
CRASHES = {
    aten.max_pool3d_with_indices.default: (lambda dtype: not dtype.is_floating_point,
                                           "torch-mlir crashes (SIGSEGV) lowering integer 3-D max pooling"),
}


# every overload of PyTorch's random ops: kernels draw their own stream (passes/seed_input.py),
# PyTorch's when UNIORCH_FALLBACK_RANDOM=1 (a run then matches eager's draws exactly)
RANDOM_NAMES = ("bernoulli", "native_dropout", "rand", "rand_like", "randn", "randn_like", "randint", "randint_like",
                "randperm", "normal", "normal_functional", "uniform", "exponential", "geometric", "multinomial",
                "poisson", "cauchy", "log_normal", "random")


def random_ops() -> set:
    out = set()
    for name in RANDOM_NAMES:
        packet = getattr(aten, name, None)
        for overload in packet.overloads() if packet is not None else ():
            out.add(getattr(packet, overload))
    return out


def fallback_random() -> bool:
    from ..config import flag

    return flag("UNIORCH_FALLBACK_RANDOM")


# higher-order ops with user subgraphs no lowering takes yet, by name: torch-mlir's importer
# refuses them ("Expected get_attr for score_mod"), after a failed compile of their region
HIGHER_ORDER = {
    "flex_attention": "flex_attention (a higher-order op: its score_mod / mask_mod are subgraphs) has no "
                      "lowering to MLIR yet; PyTorch runs it",
    "flex_attention_backward": "flex_attention's backward has no lowering to MLIR yet; PyTorch runs it",
}


def reason(target, node=None) -> str:
    if isinstance(target, torch._ops.HigherOrderOperator):
        return HIGHER_ORDER.get(target.name(), "")
    if fallback_random() and target in random_ops():
        return "UNIORCH_FALLBACK_RANDOM=1: PyTorch draws it, as eager does"
    if target in CRASHES and node is not None:
        first = node.args[0].meta.get("val") if node.args and hasattr(node.args[0], "meta") else None
        applies, why = CRASHES[target]
        if isinstance(first, torch.Tensor) and applies(first.dtype):
            return why
    return EAGER_ONLY.get(target, "")
