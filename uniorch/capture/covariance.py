"""`torch.cov` and `torch.corrcoef` as ATen computes them, without its data-dependent checks.

Why: ATen's `cov` (CompositeImplicitAutograd, native/Correlation.cpp) reads tensors as Python
values on its way: whether the degrees of freedom are <= 0 (`norm_factor.le(0)`, a tensor even
when unweighted), whether weights are negative or sum to zero. A trace cannot read values, so any
model calling `cov` or `corrcoef` ran whole in PyTorch. Here the unweighted normalisation is the
number it is (observations - correction, known from the shape), and the weighted one is clamped
as ATen clamps it; ATen's errors on weights become `require` checks: when one fails, the call runs
eagerly and raises ATen's own error. Real inputs only; complex inputs and the single-observation
corner ATen zeroes in place stay ATen's.

Two uses. Export records `cov` and `corrcoef` whole, but computes their results' shapes by running
a CompositeImplicitAutograd kernel on fake tensors (it failed inside ATen's), and Dynamo and
AOTAutograd do the same on the training path: while uniorch traces (`traced`: capture's export,
the training path's Dynamo call), and not outside it, the functions here are the ops' kernels; a
torch.compile of another backend in the process keeps ATen's. Then, in capture's decomposition
table, they decompose the ops export recorded.
"""
from __future__ import annotations

import contextlib
import contextvars
import warnings

import torch

from .checks import require

aten = torch.ops.aten

# False on the training path: a check's effect token becomes an output of AOTAutograd's forward,
# which capture cannot take apart yet; a weighted cov there stays eager (a graph break)
_CHECKS = contextvars.ContextVar("uniorch_covariance_checks", default=True)

_DOF = "cov(): degrees of freedom is <= 0. Correction should be strictly less than the number of observations."


def _cov(x, correction=1, fweights=None, aweights=None):
    if x.dim() > 2 or x.dtype == torch.bool or x.is_complex():
        return NotImplemented
    data = x.reshape(1, -1) if x.dim() < 2 else x  # (variables, observations)
    n = data.shape[1]
    fw, aw = fweights, aweights
    if fw is not None and (fw.dim() > 1 or fw.dtype.is_floating_point or fw.is_complex() or fw.numel() != n):
        return NotImplemented  # ATen's shape and dtype errors, raised by ATen
    if aw is not None and (aw.dim() > 1 or not aw.dtype.is_floating_point or aw.numel() != n):
        return NotImplemented
    if n == 1 and (fw is None) != (aw is None):
        return NotImplemented  # ATen zeroes its (possibly aliased) input here
    if fw is None and aw is None:
        centred = data - (data.sum(1) / n).unsqueeze(1)
        dof = n - correction
        if dof <= 0:
            warnings.warn(_DOF)
            dof = 0
        return torch.true_divide(torch.mm(centred, centred.t()), dof).squeeze()
    if not _CHECKS.get():  # as ATen's kernel fails there: Dynamo breaks the graph around the call
        from torch._subclasses.fake_tensor import DataDependentOutputException

        raise DataDependentOutputException(aten.cov.default)
    if fw is not None and n > 0:
        require(fw >= 0, "cov(): fweights cannot be negative")
    if aw is not None and n > 0:
        require(aw >= 0, "cov(): aweights cannot be negative")
    w = fw * aw if fw is not None and aw is not None else (fw if fw is not None else aw)
    w_sum = w.sum()
    require(w_sum != 0, "cov(): weights sum to zero, can't be normalized")
    avg = (data * w).sum(1) / w_sum
    if correction == 0:
        dof = w_sum
    elif aw is None:
        dof = w_sum - correction
    elif fw is None and n == 1 and correction == 1:
        dof = torch.zeros((), dtype=torch.long, device=x.device)
    else:
        dof = w_sum - correction * (w * aw).sum() / w_sum
    dof = torch.where(dof <= 0, torch.zeros_like(dof), dof)  # ATen warns and divides by 0
    centred = data - avg.unsqueeze(1)
    return torch.true_divide(torch.mm(centred, (centred * w).t()), dof).squeeze()


def _corrcoef(x):
    c = _cov(x)
    if c is NotImplemented:
        return NotImplemented
    if c.dim() == 0:
        return c / c  # nan for a 0, inf or nan variance, else 1: ATen's
    std = torch.sqrt(torch.diagonal(c))
    c = c / std.reshape(-1, 1)
    c = c / std.reshape(1, -1)
    return torch.clip(c, -1, 1)


TABLE = {
    aten.cov.default: _cov,
    aten.corrcoef.default: _corrcoef,
}


def _or_aten(op, fn):
    def kernel(*args, **kwargs):
        out = fn(*args, **kwargs)
        return op.decompose(*args, **kwargs) if out is NotImplemented else out

    return kernel


@contextlib.contextmanager
def traced(checks: bool = True):
    """TABLE's functions as the ops' CompositeImplicitAutograd kernels for the Python dispatcher
    (what export's trace runs), restored after; without `checks`, the weighted forms, which need
    `require`, refuse to trace, as ATen's kernel does."""
    key = torch._C.DispatchKey.CompositeImplicitAutograd
    token = _CHECKS.set(checks)
    saved = {op: op.py_kernels.pop(key, None) for op in TABLE}
    try:
        for op, fn in TABLE.items():
            op.py_impl(key)(_or_aten(op, fn))
        yield
    finally:
        _CHECKS.reset(token)
        for op, kernel in saved.items():
            op.py_kernels.pop(key, None)
            if kernel is not None:
                op.py_kernels[key] = kernel
            op._dispatch_cache.clear()
