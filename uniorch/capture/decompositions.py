"""Which ATen ops capture decomposes before import.

torch-mlir's own table is the starting point: core ATen decompositions plus the overloads its
lowering needs (eval-mode batch norm's `_native_batch_norm_legit_no_training`, whose saved
statistics are zero-sized and break the direct lowering, among them). On top of it, uniorch adds
decompositions for ops torch-mlir imports but cannot lower in every mode (see each below).
"""
from __future__ import annotations

import functools
import math

import torch
from torch_mlir.extras.fx_decomp_util import get_decomposition_table

from . import cia_ops
from .embedding_bag import embedding_bag as _embedding_bag, embedding_bag_backward as _embedding_bag_backward

aten = torch.ops.aten


def _embedding_renorm(weight, indices, max_norm, norm_type):
    """The rows `indices` names whose norm exceeds max_norm, scaled to it (ATen's max_norm / (norm +
    1e-7)); nn.Embedding(max_norm=...) does this to its weight before every lookup.

    Why: torch-mlir has no lowering ("lowering to torch backend contract failed"). A repeated index
    writes the same row twice, so the scatter's order does not matter."""
    flat = indices.reshape(-1)
    rows = weight.index_select(0, flat)
    norms = torch.linalg.vector_norm(rows, ord=norm_type, dim=1, keepdim=True)
    scale = torch.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
    return weight.index_put((flat,), rows * scale.to(rows.dtype))


def _byte_full_like(x, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    """`full_like` to uint8 (`ones_like`, `x ** 0`) as an int32 fill cast to uint8.

    Why: torch-mlir fails to lower `full_like` to uint8 ("lowering torch to linalg failed"); PyTorch's
    `full` decomposes to `full_like` again, so the fill is made in int32."""
    dtype = x.dtype if dtype is None else dtype
    if dtype != torch.uint8 or not isinstance(fill_value, (int, bool)):
        return NotImplemented
    device = x.device if device is None else device
    return torch.full(x.shape, int(fill_value), dtype=torch.int32, device=device).to(dtype)


def _embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    """PyTorch's decomposition, given the indices flattened to one dim and the gradient to match.

    Why: with the (batch, length) indices of a language model it scatters by a 2-D index, which
    torch-mlir lowers, at symbolic sizes, to as many updates as batch rows for batch x length
    indices; such a scatter stays in PyTorch (`fuse_common._scatter_rows_agree`), so every training
    step at varying lengths ran the embedding's gradient eagerly after a failed compile."""
    from torch._decomp.decompositions import embedding_dense_backward

    flat = indices.reshape(-1)
    rows = grad_output.reshape((flat.shape[0],) + tuple(grad_output.shape[indices.dim():]))
    return embedding_dense_backward(rows, flat, num_weights, padding_idx, scale_grad_by_freq)


def _gelu(x, approximate="none"):
    """`gelu(approximate="tanh")` as ATen's own formula, with sqrt(2/pi) in full precision.

    Why: torch-mlir's lowering approximates pi by 22/7 in the tanh form (relative error up to
    ~1e-3, far beyond fp32 tolerance). Low-precision inputs compute in fp32 and round once, as
    ATen's CPU and CUDA kernels do. The erf form stays torch-mlir's.
    """
    if approximate != "tanh":
        return NotImplemented
    dtype = x.dtype
    if dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * (x * x * x))
    return (0.5 * x * (1.0 + torch.tanh(inner))).to(dtype)


def _elu(x, alpha=1.0, scale=1.0, input_scale=1.0):
    """ATen's ELU (and SELU, CELU through it): `alpha * expm1(x * input_scale)` below zero. Why:
    torch-mlir's `exp(x) - 1` cancels for small negative x (-1.7e-8 gave 0, eager -1.7e-8)."""
    if not x.is_floating_point():
        return NotImplemented
    neg = alpha * scale * torch.expm1(x * input_scale)
    return torch.where(x > 0, x * scale, neg)


def _logaddexp_like(base2: bool):
    """ATen's logaddexp(2): max + log1p(e^-|a - b|) (base 2: log1p(2^-|a - b|) / ln 2), and a
    where both are the same infinity. Why: torch-mlir's lowering lost the small sum's bits
    (logaddexp2(-1e-6, -19.3) 5% off in float32). 16-bit inputs compute in fp32 (capture/opmath.py)."""
    def decomposed(a, b):
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or not a.is_floating_point():
            return NotImplemented
        m = torch.maximum(a, b)
        d = -(a - b).abs()
        out = m + (torch.log1p(torch.exp2(d)) * (1.0 / math.log(2.0)) if base2 else torch.log1p(torch.exp(d)))
        return torch.where(torch.isinf(a) & (a == b), a, out)
    return decomposed


# Ops torch-mlir cannot take to linalg ("failed to legalize" at the backend contract, found by
# PyTorch's OpInfo suite: python -m uniorch.tools.opinfo_coverage), for which PyTorch's own
# decomposition table has a rewrite into ops it can. Only ops that fail today are listed, so
# nothing torch-mlir already lowers changes shape.
TORCH_DECOMPOSED = (
    "addmv", "as_strided_copy", "narrow_copy", "view_copy", "permute_copy", "unbind_copy",
    "dist",
    # random ops torch-mlir has no lowering for: PyTorch writes them with rand/randn, which compile
    "normal", "log_normal", "cauchy",
)


def _diagonal_scatter(x, src, offset=0, dim1=0, dim2=1):
    """`diagonal_scatter` as a select between the input and `src` spread over the plane of dim1
    and dim2 (torch-mlir cannot lower it; PyTorch's decomposition writes in place through a view,
    which re-functionalizes to diagonal_scatter again). Pure gathers and a where: exact."""
    d1, d2 = dim1 % x.dim(), dim2 % x.dim()
    n1, n2, length = x.shape[d1], x.shape[d2], src.shape[-1]
    if length == 0:
        return x.clone()
    i = torch.arange(n1, device=x.device)[:, None]
    j = torch.arange(n2, device=x.device)[None, :]
    on = (j - i) == offset  # [n1, n2]: the positions of the diagonal
    k = torch.clamp(i if offset >= 0 else j, max=length - 1).expand(n1, n2)  # their index in src
    spread = torch.index_select(src, -1, k.reshape(-1)).reshape(*src.shape[:-1], n1, n2)
    spread = torch.movedim(spread, (-2, -1), (d1, d2))
    on = (on if d1 < d2 else on.t()).reshape([n1 if d == d1 else n2 if d == d2 else 1 for d in range(x.dim())])
    return torch.where(on, spread, x)


def _as_strided_scatter(x, src, size, stride, storage_offset=None):
    """`as_strided_scatter` on the input's contiguous storage: the view's element offsets are
    computed (offset + sum of index * stride) and `src` is put there (an index_put; torch-mlir
    cannot lower the op, and PyTorch's decomposition leaves prims.as_strided_scatter)."""
    offsets = torch.full([], storage_offset or 0, dtype=torch.int64, device=x.device)
    for d, (n, st) in enumerate(zip(size, stride)):
        offsets = offsets + (torch.arange(n, device=x.device) * st).reshape([n] + [1] * (len(size) - d - 1))
    flat = torch.index_put(x.reshape(-1), (offsets.reshape(-1),), src.reshape(-1))
    return flat.reshape(x.shape)


def _amax_amin_0d(reduce):
    """`amax`/`amin` of a 0-d tensor is the tensor (torch-mlir fails to lower a reduction over
    the one dim a 0-d tensor is allowed to name, so logsumexp of a scalar fell back); of a bool
    tensor, any/all (codegen has no unsigned min/max reductions: they fell back)."""

    def decomposed(x, dim=(), keepdim=False):
        if x.dim() == 0:
            return x.clone()
        if x.dtype == torch.bool and x.numel():  # codegen has no unsigned min/max: any/all are amax/amin
            dims = list(range(x.dim())) if not dim else [dim] if isinstance(dim, int) else list(dim)
            # all over dims as not-any-not: torch-mlir lowers no all.dims over several dims
            return torch.any(x, dims, keepdim) if reduce == "amax" else ~torch.any(~x, dims, keepdim)
        return NotImplemented

    decomposed.__name__ = f"_{reduce}_0d"
    return decomposed


def _cumulative(op):
    """`cumsum`/`cumprod` of a 0-d tensor is the tensor (cast to `dtype`), and `cumprod(x, dim,
    dtype=d)` the cast then the plain scan: torch-mlir lowers neither form (masked.cumprod passes
    the input's own dtype)."""

    def decomposed(x, dim, dtype=None):
        if x.dim() == 0:
            return x.to(dtype).clone() if dtype is not None else x.clone()
        if dtype is None or op is torch.cumsum:
            return NotImplemented
        return op(x.to(dtype), dim)

    return decomposed


def _kthvalue_0d(x, k, dim=-1, keepdim=False):
    """`kthvalue` of a 0-d tensor (k = 1): the tensor and index 0 (torch-mlir rejects its dim)."""
    if x.dim() != 0:
        return NotImplemented
    return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)


def _resize(x, size, memory_format=None):
    """The functional `resize` (resize_, resize_as_) to the shape the tensor already has: the
    values unchanged. Other sizes read or leave uninitialized storage; those stay eager."""
    if list(size) != list(x.shape):
        return NotImplemented
    return x.clone()


def _linalg_norm(x, ord=None, dim=None, keepdim=False, dtype=None):
    """`linalg.norm` as the vector or matrix norm it means (torch-mlir lowers `linalg_vector_norm`
    but not `linalg_norm`): PyTorch's rules for which, and the matrix orders 'fro', ±1, ±inf.
    The spectral and nuclear norms need singular values and stay eager."""
    if isinstance(dim, int):
        dim = [dim]
    if ord is not None and ((dim is not None and len(dim) == 2) or (dim is None and x.dim() == 2)):
        d0, d1 = [d % x.dim() for d in (dim or (0, 1))]
        if ord == "fro":
            return torch.linalg.vector_norm(x, 2, [d0, d1], keepdim, dtype=dtype)
        if isinstance(ord, str) or abs(ord) not in (1, math.inf):
            return NotImplemented
        if dtype is not None:
            x = x.to(dtype)
        if abs(ord) == math.inf:  # max (min) over rows of the row sums
            d0, d1 = d1, d0
        sums = torch.sum(torch.abs(x), d0, keepdim=True)
        out = torch.amax(sums, d1, keepdim=True) if ord > 0 else torch.amin(sums, d1, keepdim=True)
        return out if keepdim else out.squeeze([d0, d1])
    return torch.linalg.vector_norm(x, 2.0 if ord is None else ord, dim, keepdim, dtype=dtype)


def _half_mean(x, dim=None, keepdim=False, dtype=None):
    """fp16/bf16 `mean` as an fp32 sum divided in fp32, rounded once, as ATen computes it; complex
    `mean` as its sum divided by the count.

    Why: torch-mlir divides by the element count in the input's dtype; 65536 overflows fp16 to
    inf, so a long fp16 mean came out NaN (and shorter ones were rounded twice)."""
    if dtype is not None or x.dtype not in (torch.float16, torch.bfloat16, torch.complex64, torch.complex128):
        return NotImplemented
    dims = list(range(x.dim())) if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0) else dim
    dims = [dims] if isinstance(dims, int) else list(dims)
    count = 1
    for d in dims:
        count *= x.shape[d]
    if x.is_complex():  # the mean of every element: torch-mlir's lowering aborted the process (LLVM ERROR)
        return torch.sum(x, dims, keepdim) / count
    return (torch.sum(x, dims, keepdim, dtype=torch.float32) / count).to(x.dtype)


def _byte_max_min(reduce):
    """`max()`/`min()` of a whole int8 or uint8 tensor as `amax`/`amin` over every dim.

    Why: torch-mlir's lowering of the all-elements max/min of a byte tensor crashed the process
    (a segmentation fault in the linalg pipeline); amax/amin lower. A bool tensor's is any/all
    (it fell back: codegen has no unsigned min/max reductions)."""
    fn = torch.amax if reduce == "max" else torch.amin

    def decomposed(x):
        # a bool tensor's amax/amin are any/all (`_amax_amin_0d`)
        if x.dtype not in (torch.int8, torch.uint8, torch.bool) or x.dtype == torch.bool and not x.numel():
            return NotImplemented
        return x.clone() if x.dim() == 0 else fn(x, list(range(x.dim())))

    decomposed.__name__ = f"_byte_{reduce}"
    return decomposed


def _float_dtype(*args):
    """The floating result dtype of PyTorch's promotion for an op that always returns floats."""
    dtype = torch.result_type(*args)
    return dtype if dtype.is_floating_point else torch.get_default_dtype()


def _copysign(a, b):
    """`copysign` as where(signbit(b), -|a|, |a|).

    Why: PyTorch's own decomposition goes through `prims.signbit`/`prims.where`, which torch-mlir
    cannot import; `aten.signbit` is a special function uniorch carries to codegen as a sign-bit
    test (uniorch/ir/special.py), exact for -0.0 and NaNs with the sign bit set, like eager."""
    if (isinstance(a, torch.Tensor) and a.is_complex()) or (isinstance(b, torch.Tensor) and b.is_complex()):
        return NotImplemented
    dtype = _float_dtype(a, b)
    a = a.to(dtype)
    mag = torch.abs(a)
    if not isinstance(b, torch.Tensor):
        return -mag if math.copysign(1.0, float(b)) < 0 else mag
    return torch.where(torch.signbit(b.to(dtype)), -mag, mag)


def _isfinite(x):
    """`isfinite` of integers and bools is all true (torch-mlir cannot lower it for any dtype);
    floats stay `aten.isfinite`, a special function of uniorch/ir/special.py (|x| < inf)."""
    if x.dtype.is_floating_point or x.is_complex():
        return NotImplemented
    return torch.ones_like(x, dtype=torch.bool)


def _signbit(x):
    """`signbit` of integers is `x < 0` (bools: never set); floats stay `aten.signbit`, a bit test
    of uniorch/ir/special.py (which also sees -0.0 and negative NaNs, as eager does)."""
    if x.dtype.is_floating_point or x.is_complex():
        return NotImplemented
    return x < 0 if x.dtype != torch.bool else torch.zeros_like(x)


def _angle(x):
    """`angle` of real numbers, as ATen computes it: pi below zero, else 0, NaN stays NaN.

    Why: torch-mlir has no `aten.angle`. Integers promote to the default float dtype."""
    if x.is_complex():
        return NotImplemented
    if not x.dtype.is_floating_point:
        x = x.to(torch.get_default_dtype())
    zero = torch.zeros_like(x)
    return torch.where(x != x, x, torch.where(x < 0, zero + math.pi, zero))


def _prims_normal(shape, *, mean, std, dtype, device, requires_grad, generator=None):
    """What PyTorch's `normal` decompositions leave behind, as randn (which compiles)."""
    if generator is not None:
        return NotImplemented  # a caller's own generator: eager draws from it
    return torch.randn(shape, dtype=dtype, device=device) * std + mean


def _randint_like(x, low_or_high, high=None, *, dtype=None, layout=None, device=None, pin_memory=None,
                  memory_format=None):
    """`randint_like` as `randint` of the input's shape (torch-mlir lowers randint, not the _like
    form); draws come from uniorch's seeded generator like every random op."""
    low, high = (0, low_or_high) if high is None else (low_or_high, high)
    return torch.randint(low, high, x.shape, dtype=dtype or x.dtype, device=device or x.device)


def _randint(*args, dtype=None, layout=None, device=None, pin_memory=None, generator=None):
    """`randint` as low + floor(u * (high - low)) with u uniform in [0, 1) drawn in float64.

    Why: torch-mlir's lowering truncates a scaled uniform sample toward zero and never rounds it
    down for float dtypes: `randint(-5, 5)` never drew -5 and drew 0 twice as often, and
    `randint(3, 10, dtype=float32)` gave 8.2457. Ranges wider than 2**32 would leave gaps in a
    float64 sample derived from fewer random bits: those stay eager."""
    low, high, size = (0, *args) if len(args) == 2 else args
    if generator is not None or high - low > 2 ** 32 or high <= low:
        return NotImplemented
    u = torch.rand(size, dtype=torch.float64, device=device)
    draw = torch.clamp(torch.floor(u * (high - low)), max=high - low - 1).to(torch.int64) + low
    return draw.to(dtype or torch.int64)


def _from_torch(names) -> dict:
    from torch._decomp import decomposition_table as torch_table

    out = {}
    for name in names:
        packet = getattr(aten, name)
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if op in torch_table and not overload.endswith("out"):
                out[op] = torch_table[op]
    return out


# modules with a TABLE of decompositions for one family of ops each
_FAMILIES = ("linalg_direct", "linalg_orthogonal", "counting", "shape_rewrites", "spectral", "data_dependent",
             "fractional_pool", "sampling", "matrix_functions", "recurrent", "statistics", "integer_division",
             "scalar_compares", "pool_backward", "conv_backward", "fused_attention", "covariance",
             "integer_power", "pad_backward")


def decomposition_table(data_dependent: bool = True) -> dict:
    """Every decomposition capture applies; `data_dependent=False` leaves out the rewrites whose
    outputs have data-dependent sizes (capture retries without them when they fail to trace).
    With UNIORCH_FALLBACK_RANDOM=1 random ops stay whole: PyTorch runs them as eager calls them."""
    from ..runtime.eager_only import fallback_random, random_ops

    from .grouped_mm import table as grouped_mm

    table = {**_table(data_dependent), **grouped_mm()}
    later = cia_ops.preservable() - _CIA_AT_FIRST_TABLE
    table.update(cia_ops.own_decompositions(op for op in later if op not in table))
    if fallback_random():
        table = {op: fn for op, fn in table.items() if op not in random_ops()}
    return table


# the CIA ops registered when `_table` was first built (`cia_ops.py`: those registered later)
_CIA_AT_FIRST_TABLE: frozenset = frozenset()


@functools.cache
def _table(data_dependent: bool = True) -> dict:
    global _CIA_AT_FIRST_TABLE
    if not _CIA_AT_FIRST_TABLE:
        _CIA_AT_FIRST_TABLE = cia_ops.preservable()
    table = dict(get_decomposition_table())
    table[aten._embedding_bag.default] = _embedding_bag
    table[aten._embedding_bag_forward_only.default] = _embedding_bag
    table[aten._embedding_bag_backward.default] = _embedding_bag_backward
    table[aten.embedding_renorm.default] = _embedding_renorm
    table[aten.embedding_dense_backward.default] = _embedding_dense_backward
    table[aten.gelu.default] = _gelu
    table[aten.full_like.default] = _byte_full_like
    table[aten.elu.default] = _elu
    table[aten.logaddexp2.default] = _logaddexp_like(True)
    table[aten.logaddexp.default] = _logaddexp_like(False)
    from .nan_semantics import TABLE as nan_preserving

    table.update(nan_preserving)
    from .sorting import TABLE as order_statistics

    table.update(order_statistics)
    table.update(_from_torch(TORCH_DECOMPOSED))
    table[torch.ops.prims.normal.default] = _prims_normal
    geometric = _from_torch(["geometric"])
    for op, fn in geometric.items():  # PyTorch's rewrite draws uniform_ into the tensor: floats only
        table[op] = (lambda f: lambda x, *a, **k: f(x, *a, **k) if x.dtype.is_floating_point else NotImplemented)(fn)
    table[aten.copysign.Tensor] = _copysign
    table[aten.copysign.Scalar] = _copysign
    table[aten.isfinite.default] = _isfinite
    table[aten.angle.default] = _angle
    table[aten.signbit.default] = _signbit
    table[aten.mean.dim] = _half_mean
    table[aten.mean.default] = lambda x, dtype=None: _half_mean(x, None, False, dtype)
    table[aten.max.default] = _byte_max_min("max")
    table[aten.min.default] = _byte_max_min("min")
    table[aten.amax.default] = _amax_amin_0d("amax")
    table[aten.amin.default] = _amax_amin_0d("amin")
    table[aten.cumprod.default] = _cumulative(torch.cumprod)
    table[aten.cumsum.default] = _cumulative(torch.cumsum)
    table[aten.kthvalue.default] = _kthvalue_0d
    table[aten.resize.default] = _resize
    table[aten.randint_like.default] = table[aten.randint_like.low_dtype] = _randint_like
    table[aten.randint.default] = table[aten.randint.low] = _randint
    table[aten.diagonal_scatter.default] = _diagonal_scatter
    table[aten.as_strided_scatter.default] = _as_strided_scatter
    table[aten.linalg_norm.default] = table[aten.linalg_norm.ord_str] = _linalg_norm
    from .distance import TABLE as distances

    table.update(distances)  # cdist
    from .scatter_decompositions import table as scatter_family

    table.update(scatter_family())  # put, index_reduce, adaptive_max_pool3d
    import importlib

    for name in _FAMILIES if data_dependent else [f for f in _FAMILIES if f != "data_dependent"]:
        table.update(importlib.import_module(f"{__package__}.{name}").TABLE)
    from .sdpa_layout import like_eager

    sdpa = aten.scaled_dot_product_attention.default
    if sdpa in table:
        table[sdpa] = like_eager(table[sdpa])
    from .opmath import wrap

    return wrap(table)  # last: around every entry above
