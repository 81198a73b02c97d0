"""`matrix_exp` as a degree-18 Taylor polynomial with scaling and squaring, all matmuls.

Why: torch-mlir cannot lower `linalg_matrix_exp`. ATen (Bader, Blanes and Casas' method) picks a
degree from {1, 2, 4, 8, 12, 18} by the matrix's 1-norm and squares s = ceil(log2(norm / θ18))
times when the norm exceeds θ18; each degree is accurate to the unit roundoff below its θ, so
always evaluating degree 18 gives the same result to rounding. The number of squarings is
data-dependent: it is computed per matrix in the graph and the squarings up to a static maximum
are applied where they are due. A norm beyond that maximum fails a run-time check and the call
runs eagerly.
"""
from __future__ import annotations


import torch

from .checks import require

aten = torch.ops.aten

THETA_18 = {torch.float32: 3.010066362817634e+00, torch.float64: 1.090863719290036e+00}  # ATen's thetas
MAX_SQUARINGS = 16
MAX_N = 32


def _matrix_exp(a):
    if a.dtype not in THETA_18 or a.numel() == 0 or a.shape[-1] > MAX_N:
        return NotImplemented
    n = a.shape[-1]
    if n == 1:
        return torch.exp(a)
    norm = torch.amax(torch.sum(torch.abs(a), -2), -1)  # the 1-norm: largest column sum
    s = torch.clamp(torch.ceil(torch.log2(norm / THETA_18[a.dtype])), min=0)
    require(~(s > MAX_SQUARINGS).any() & torch.isfinite(norm).all(),
            f"matrix_exp: 1-norm within θ18·2^{MAX_SQUARINGS} (more squarings than compiled)")
    s = torch.clamp(s, max=MAX_SQUARINGS)
    scaled = a / torch.exp2(s)[..., None, None]
    eye = torch.eye(n, dtype=a.dtype, device=a.device).expand(a.shape)
    # Horner on exp(A) - I, adding I once at the end: the identity's rounding no longer enters
    # every step (measured over random batches: about half of eager's median error)
    y = scaled / 18
    for k in range(17, 0, -1):
        y = (scaled + scaled @ y) / k
    x = eye + y
    for i in range(MAX_SQUARINGS):
        x = torch.where((s > i)[..., None, None], x @ x, x)
    return x


TABLE = {aten.linalg_matrix_exp.default: _matrix_exp}
