"""Complex tensors as pairs of reals, so graphs with complex values compile.

Why: torch-mlir imports complex64 as `complex<f32>` (complex128 not at all), and Triton has no
complex type; every kernel is written over real element types. Like Inductor, uniorch represents
a complex tensor of shape S as the real tensor of shape S + [2] that `torch.view_as_real` gives
(real part, imaginary part; the same memory), and rewrites each op on complex values into real
arithmetic on those pairs. At the boundary the runtime passes `view_as_real(x)` for a complex
input and returns `view_as_complex(y)` for a complex output: views, no copies.

The rewrite re-traces the captured graph through an interpreter that carries complex values as
`Pair`s, with a rule per ATen op (RULES). A graph with an op on complex values no rule covers is
left as it was (its complex ops then fall back to eager, as before): never a guess.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable

import torch
import torch.fx as fx
from torch.fx import traceback as fx_traceback
import torch.utils._pytree as pytree

from ..runtime.boundary import as_complex, as_pair  # noqa: F401 - the boundary's half of the pairing
from .retrace import placeholder_values, renamed, retrace

aten = torch.ops.aten
prims = torch.ops.prims

REAL_OF = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}
COMPLEX_OF = {v: k for k, v in REAL_OF.items()}


class Unsupported(Exception):
    """An op on complex values no rule covers: the graph stays as captured."""


class Pair:
    """A complex tensor as its real view: `t[..., 0]` real parts, `t[..., 1]` imaginary parts."""

    __slots__ = ("t",)

    def __init__(self, t: torch.Tensor):
        self.t = t

    @staticmethod
    def of(re: torch.Tensor, im: torch.Tensor) -> "Pair":
        re, im = torch.broadcast_tensors(re, im)
        return Pair(torch.stack([re, im], -1))

    @property
    def re(self) -> torch.Tensor:
        return self.t[..., 0]

    @property
    def im(self) -> torch.Tensor:
        return self.t[..., 1]

    @property
    def ndim(self) -> int:  # the complex tensor's rank
        return self.t.dim() - 1


def _parts(x) -> tuple[Any, Any]:
    """Real and imaginary parts of a Pair, a real tensor or a Python number."""
    if isinstance(x, Pair):
        return x.re, x.im
    if isinstance(x, complex):
        return x.real, x.imag
    if isinstance(x, torch.Tensor):
        return x, torch.zeros_like(x)
    return x, 0.0


def _dim(d: int, ndim: int) -> int:
    """A complex tensor's dim in its pair: negative dims must skip the trailing pair dim."""
    return d % max(ndim, 1) if ndim else 0


def _real_dtype(dtype):
    return REAL_OF.get(dtype, dtype)


# -- rules: each takes the node's args (Pairs for complex values) and returns the new value -------

def _add(a, b, alpha=1):
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    return Pair.of(ar + alpha * br, ai + alpha * bi)


def _sub(a, b, alpha=1):
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    return Pair.of(ar - alpha * br, ai - alpha * bi)


def _mul(a, b):
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    if not isinstance(b, (Pair, complex)):
        return Pair.of(ar * br, ai * br)
    if not isinstance(a, (Pair, complex)):
        return Pair.of(ar * br, ar * bi)
    return Pair.of(ar * br - ai * bi, ar * bi + ai * br)


def _div(a, b, rounding_mode=None):
    if rounding_mode is not None:
        raise Unsupported("complex division with a rounding mode")
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    if not isinstance(b, (Pair, complex)):
        return Pair.of(ar / br, ai / br)
    # Smith's algorithm, as c10's complex division: no overflow from squaring |b|
    use_re = torch.abs(br) >= torch.abs(bi) if isinstance(br, torch.Tensor) else abs(br) >= abs(bi)
    r1, d1 = bi / br, br + bi * (bi / br)
    r2, d2 = br / bi, br * (br / bi) + bi
    re = torch.where(use_re, (ar + ai * r1) / d1, (ar * r2 + ai) / d2)
    im = torch.where(use_re, (ai - ar * r1) / d1, (ai * r2 - ar) / d2)
    return Pair.of(re, im)


def _neg(a):
    return Pair(-a.t)


def _conj(a):
    return Pair.of(a.re, -a.im)


def _abs(a):
    return torch.hypot(a.re, a.im)


def _angle(a):
    return torch.atan2(a.im, a.re)


def _exp(a):
    mag = torch.exp(a.re)
    return Pair.of(mag * torch.cos(a.im), mag * torch.sin(a.im))


def _complex(re, im):
    return Pair.of(re, im)


def _polar(mag, angle):
    return Pair.of(mag * torch.cos(angle), mag * torch.sin(angle))


def _to_dtype(x, dtype):
    """A cast to `dtype` from a Pair or a real tensor (complex → real keeps the real part, as
    PyTorch does, with its warning at capture)."""
    if dtype is None:
        return x
    if dtype in REAL_OF:
        re, im = _parts(x)
        real = REAL_OF[dtype]
        return Pair.of(re.to(real), im.to(real) if isinstance(im, torch.Tensor) else torch.zeros_like(re, dtype=real))
    return x.re.to(dtype) if isinstance(x, Pair) else x.to(dtype)


def _convert_element_type(x, dtype):
    return _to_dtype(x, dtype)


def _to_copy(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    return _to_dtype(x, dtype) if dtype is not None else (Pair(x.t.clone()) if isinstance(x, Pair) else x.clone())


def _clone(x, memory_format=None):
    return Pair(x.t.clone())


def _view_as_real(x):
    return x.t if isinstance(x, Pair) else torch.stack([x, torch.zeros_like(x)], -1)


def _view_as_complex(x):
    return Pair(x)


def _real(x):
    return x.re


def _imag(x):
    return x.im


def _shape_op(fn: Callable[..., torch.Tensor], dims: tuple[int, ...] = ()):
    """A view or shape op on a Pair: the same op on the pair tensor, with the complex tensor's dims
    (args at positions `dims`) made non-negative so they never name the pair dim."""

    def rule(x, *args, **kwargs):
        args = list(args)
        for i in dims:
            if i - 1 < len(args):
                v = args[i - 1]
                args[i - 1] = [_dim(d, x.ndim) for d in v] if isinstance(v, (list, tuple)) else _dim(v, x.ndim)
        return Pair(fn(x.t, *args, **kwargs))

    return rule


def _view(x, size):
    return Pair(torch.reshape(x.t, list(size) + [2]))


def _expand(x, size, implicit=False):
    return Pair(x.t.expand(*size, 2))


def _permute(x, dims):
    return Pair(x.t.permute([_dim(d, x.ndim) for d in dims] + [x.ndim]))


def _cat(tensors, dim=0):
    ndim = next(t.ndim for t in tensors if isinstance(t, Pair))
    pairs = [t if isinstance(t, Pair) else Pair.of(*_parts(t)) for t in tensors]
    return Pair(torch.cat([p.t for p in pairs], _dim(dim, ndim)))


def _sum(x, dim=None, keepdim=False, dtype=None):
    if dim is None or len(dim) == 0:
        dim = list(range(x.ndim))
    out = Pair(torch.sum(x.t, [_dim(d, x.ndim) for d in dim], keepdim))
    return _to_dtype(out, dtype) if dtype is not None else out


def _where(cond, a, b):
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    return Pair.of(torch.where(cond, ar, br), torch.where(cond, ai, bi))


def _eq(a, b):
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    return (ar == br) & (ai == bi)


def _ne(a, b):
    return ~_eq(a, b)


def _isnan(a):
    return torch.isnan(a.re) | torch.isnan(a.im)


def _mm(a, b):
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    if not isinstance(b, Pair):
        return Pair.of(ar @ br, ai @ br)
    if not isinstance(a, Pair):
        return Pair.of(ar @ br, ar @ bi)
    return Pair.of(ar @ br - ai @ bi, ar @ bi + ai @ br)


def _roll(x, shifts, dims=()):
    if not dims:  # a roll of the flattened tensor would move real and imaginary parts apart
        return Pair(torch.roll(x.t.reshape(-1, 2), shifts, 0).reshape(x.t.shape))
    return Pair(torch.roll(x.t, shifts, [_dim(d, x.ndim) for d in dims]))


def _identity(x, *args, **kwargs):
    return x


def _drop(*args, **kwargs):
    return None


def _full_like_rule(x, fill_value, dtype=None, **kwargs):
    dtype = dtype or (COMPLEX_OF[x.t.dtype] if isinstance(x, Pair) else x.dtype)
    if dtype not in REAL_OF:
        return torch.full_like(x.re if isinstance(x, Pair) else x, fill_value, dtype=dtype)
    re, im = _parts(complex(fill_value))
    like = x.re if isinstance(x, Pair) else x
    return Pair.of(torch.full_like(like, re, dtype=REAL_OF[dtype]), torch.full_like(like, im, dtype=REAL_OF[dtype]))


RULES: dict[Any, Callable] = {
    aten.add.Tensor: _add, aten.add.Scalar: _add, aten.sub.Tensor: _sub, aten.sub.Scalar: _sub,
    aten.mul.Tensor: _mul, aten.mul.Scalar: _mul, aten.div.Tensor: _div, aten.div.Scalar: _div,
    aten.div.Tensor_mode: _div,
    aten.neg.default: _neg, aten.conj_physical.default: _conj, aten._conj.default: _conj,
    aten._conj_physical.default: _conj, aten.conj.default: _conj,
    aten.resolve_conj.default: _identity, aten.resolve_neg.default: _identity,
    aten.abs.default: _abs, aten.angle.default: _angle, aten.exp.default: _exp,
    aten.complex.default: _complex, aten.polar.default: _polar,
    prims.convert_element_type.default: _convert_element_type, aten._to_copy.default: _to_copy,
    aten.clone.default: _clone, aten.alias.default: _shape_op(torch.ops.aten.alias.default),
    aten.view_as_real.default: _view_as_real, aten.view_as_complex.default: _view_as_complex,
    aten.real.default: _real, aten.imag.default: _imag,
    aten.view.default: _view, aten._unsafe_view.default: _view, aten.reshape.default: _view,
    aten.expand.default: _expand, aten.permute.default: _permute,
    aten.unsqueeze.default: _shape_op(torch.unsqueeze, (1,)),
    aten.squeeze.dim: _shape_op(torch.squeeze, (1,)), aten.squeeze.dims: _shape_op(torch.squeeze, (1,)),
    aten.transpose.int: _shape_op(torch.transpose, (1, 2)),
    aten.select.int: _shape_op(torch.select, (1,)),
    aten.slice.Tensor: _shape_op(lambda t, dim=0, start=None, end=None, step=1: aten.slice.Tensor(t, dim, start, end, step), (1,)),
    aten.index_select.default: _shape_op(torch.index_select, (1,)),
    aten.flip.default: _shape_op(torch.flip, (1,)),
    aten.roll.default: _roll,
    aten.cat.default: _cat, aten.sum.dim_IntList: _sum, aten.sum.default: lambda x, dtype=None: _sum(x, None, False, dtype),
    aten.where.self: _where, aten.eq.Tensor: _eq, aten.eq.Scalar: _eq, aten.ne.Tensor: _ne, aten.ne.Scalar: _ne,
    aten.isnan.default: _isnan,
    aten.mm.default: _mm, aten.bmm.default: _mm,
    aten.full_like.default: _full_like_rule,
    aten._assert_tensor_metadata.default: _drop,
}


def has_complex(gm: fx.GraphModule) -> bool:
    def complex_val(v):
        return isinstance(v, torch.Tensor) and v.is_complex()

    return any(any(complex_val(v) for v in pytree.tree_leaves(n.meta.get("val"))) for n in gm.graph.nodes)


_VIEWS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)


class _PairInterpreter(fx.Interpreter):
    def run_node(self, n: fx.Node) -> Any:
        with fx_traceback.set_current_meta(n):  # source locations carry over to the new nodes
            return self._run(n)

    def _run(self, n: fx.Node) -> Any:
        if n.op != "call_function":
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        if n.target is operator.getitem:
            return args[0][args[1]]
        involved = any(isinstance(a, Pair) for a in pytree.tree_leaves((args, kwargs)))
        out_complex = any(isinstance(v, torch.Tensor) and v.is_complex() for v in pytree.tree_leaves(n.meta.get("val")))
        if not involved and not out_complex:
            if n.target in _VIEWS:
                try:
                    return n.target(*args, **kwargs)
                except (RuntimeError, ValueError):
                    # a real tensor a pair rule made (a magnitude) need not have the layout the complex
                    # op's result had, so a view taken of it may need a copy (a log-mel front end:
                    # stft(...).abs().transpose(-1, -2) @ fb viewed its (2, 101, 33) operand as (202, 33))
                    return torch.ops.aten.reshape.default(*args, **kwargs)
            return n.target(*args, **kwargs)
        rule = RULES.get(n.target)
        if rule is None:
            raise Unsupported(f"{n.target} on complex values")
        return rule(*args, **kwargs)


def to_pairs(cg) -> bool:
    """Rewrites `cg` (a CapturedGraph) in place so no value in its graph is complex. Returns
    whether it did; False leaves it untouched (no complex values, or an op without a rule)."""
    gm = cg.graph_module
    if not has_complex(gm):
        return False
    vals = placeholder_values(gm)
    if vals is None:
        return False
    out_node = gm.graph.output_node()
    out_complex = [isinstance(a, fx.Node) and isinstance(a.meta.get("val"), torch.Tensor) and a.meta["val"].is_complex()
                   for a in out_node.args[0]]

    def paired(*flat):
        ins = [Pair(x) if v.is_complex() else x for x, v in zip(flat, vals)]
        outs = _PairInterpreter(gm).run(*ins)
        return tuple(o.t if isinstance(o, Pair) else o for o in outs)

    def example(v):  # a complex input as its real pairs
        shape, dtype = (list(v.shape) + [2], REAL_OF[v.dtype]) if v.is_complex() else (v.shape, v.dtype)
        return torch.zeros(shape, dtype=dtype, device=v.device)

    try:
        new = retrace(paired, vals, example)
    except Unsupported:
        return False
    names = renamed(gm, new)
    cg.graph_module = new
    cg.inputs = [dataclasses.replace(i, name=names[i.name], complex_dtype=v.dtype if v.is_complex() else None)
                 for i, v in zip(cg.inputs, vals)]
    cg.outputs = [dataclasses.replace(o, complex_dtype=_complex_dtype_of(a) if c else None)
                  for o, a, c in zip(cg.outputs, out_node.args[0], out_complex)]
    return True


def _complex_dtype_of(node: fx.Node):
    return node.meta["val"].dtype


__all__ = ["Pair", "RULES", "as_complex", "as_pair", "has_complex", "to_pairs"]
