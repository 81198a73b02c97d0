"""Random op graphs for fuzzing uniorch against eager PyTorch (Hypothesis strategies).

A program is a list of steps over a growing list of values; each step reads earlier values and
appends one. Shapes are tracked while drawing, so every drawn program is valid PyTorch; values are
kept in a tame range (tanh / clamp before exp) so comparisons test the compiler, not overflow.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

UNARY = ("relu", "tanh", "sigmoid", "neg", "abs", "sin", "exp_tamed", "sqrt_abs", "gelu", "silu")
BINARY = ("add", "mul", "sub", "maximum", "div_safe", "where_gt")
REDUCE = ("sum", "mean", "amax", "amin")


@dataclass
class Program:
    """Values are referenced as ("in", k) for the k-th input or ("v", k) for the k-th step's result."""

    input_shapes: list[tuple[int, ...]]
    input_dtypes: list[torch.dtype]
    steps: list[tuple]  # (op, [refs], params)
    outputs: list[tuple]

    def make_inputs(self) -> list[torch.Tensor]:
        out = []
        for shape, dt in zip(self.input_shapes, self.input_dtypes):
            if dt.is_floating_point:
                out.append(torch.randn(shape).to(dt))
            else:
                out.append(torch.randint(-5, 6, shape, dtype=dt))
        return out

    def __call__(self, *inputs):
        vals: list = []

        def get(ref):
            return inputs[ref[1]] if ref[0] == "in" else vals[ref[1]]

        for op, args, params in self.steps:
            vals.append(_apply(op, [get(r) for r in args], params))
        return tuple(get(r) for r in self.outputs)

    def __repr__(self) -> str:
        lines = [f"inputs {list(zip(self.input_shapes, self.input_dtypes))}"]
        lines += [f"  v{k} = {op}({', '.join(f'{a}{b}' for a, b in args)}) {params or ''}"
                  for k, (op, args, params) in enumerate(self.steps)]
        lines.append(f"  return {self.outputs}")
        return "\n".join(lines)


def _apply(op, a, p):
    x = a[0]
    if op in UNARY:
        if op == "exp_tamed":
            return torch.exp(torch.tanh(x))
        if op == "sqrt_abs":
            return torch.sqrt(x.abs() + 1)
        if op == "gelu":
            return torch.nn.functional.gelu(x)
        if op == "silu":
            return torch.nn.functional.silu(x)
        return getattr(torch, op)(x)
    if op in BINARY:
        y = a[1]
        if op == "div_safe":
            return x / (y.abs() + 1)
        if op == "where_gt":
            return torch.where(x > y, x, y * 0.5)
        return getattr(torch, op)(x, y)
    if op in REDUCE:
        return getattr(torch, op)(x, dim=p["dim"], keepdim=p["keepdim"])
    if op == "softmax":
        return torch.softmax(x, dim=p["dim"])
    if op == "layer_norm":
        return torch.nn.functional.layer_norm(x, x.shape[-1:])
    if op == "matmul":
        return x @ a[1]
    if op == "reshape":
        return x.reshape(p["shape"])
    if op == "permute":
        return x.permute(p["perm"])
    if op == "narrow":
        return x.narrow(p["dim"], p["start"], p["length"])
    if op == "cat":
        return torch.cat([x, a[1]], dim=p["dim"])
    if op == "cast":
        return x.to(p["dtype"]).to(x.dtype)
    if op == "scale":
        return x * p["c"] + p["b"]
    raise AssertionError(op)


def _broadcastable_to(draw, shape):
    """A shape that broadcasts to `shape`: some dims set to 1, maybe leading dims dropped."""
    dims = [1 if draw(st.booleans()) else d for d in shape]
    drop = draw(st.integers(0, len(dims) - 1)) if dims else 0
    return tuple(dims[drop:])


@st.composite
def programs(draw, max_steps: int = 6, float_dtypes=(torch.float32,)):
    dims = st.integers(1, 9)
    base = tuple(draw(dims) for _ in range(draw(st.integers(1, 3))))
    dtype = draw(st.sampled_from(float_dtypes))
    values: list[tuple[tuple, tuple[int, ...]]] = [(("in", 0), base)]  # (ref, shape) of every value
    in_shapes = [base]
    steps: list[tuple] = []

    def new_input(shape):
        in_shapes.append(shape)
        ref = ("in", len(in_shapes) - 1)
        values.append((ref, shape))
        return ref

    def push(op, args, params, shape):
        steps.append((op, args, params))
        values.append((("v", len(steps) - 1), shape))

    for _ in range(draw(st.integers(1, max_steps))):
        x, s = draw(st.sampled_from(values))
        kind = draw(st.sampled_from(("unary", "binary", "binary", "reduce", "softmax", "layer_norm", "matmul",
                                     "reshape", "permute", "narrow", "cat", "cast", "scale")))
        if kind == "unary":
            push(draw(st.sampled_from(UNARY)), [x], {}, s)
        elif kind == "binary":
            other = _broadcastable_to(draw, s) if s else ()
            same = [r for r, t in values if t == other]
            y = draw(st.sampled_from(same)) if same and draw(st.booleans()) else new_input(other)
            push(draw(st.sampled_from(BINARY)), [x, y] if draw(st.booleans()) else [y, x], {},
                 tuple(torch.broadcast_shapes(s, other)))
        elif kind in ("reduce", "softmax") and s:
            dim = draw(st.integers(-len(s), len(s) - 1))
            if kind == "softmax":
                push("softmax", [x], {"dim": dim}, s)
            else:
                keep = draw(st.booleans())
                out = list(s)
                if keep:
                    out[dim] = 1
                else:
                    out.pop(dim)
                push(draw(st.sampled_from(REDUCE)), [x], {"dim": dim, "keepdim": keep}, tuple(out))
        elif kind == "layer_norm" and s:
            push("layer_norm", [x], {}, s)
        elif kind == "matmul" and len(s) >= 2:
            n = draw(dims)
            push("matmul", [x, new_input((s[-1], n))], {}, s[:-1] + (n,))
        elif kind == "reshape" and s:
            numel = 1
            for d in s:
                numel *= d
            choices = [(numel,), (1, numel)] + ([(s[0], numel // s[0])] if len(s) > 1 else [])
            shape = draw(st.sampled_from(choices))
            push("reshape", [x], {"shape": shape}, shape)
        elif kind == "permute" and len(s) >= 2:
            perm = tuple(draw(st.permutations(range(len(s)))))
            push("permute", [x], {"perm": perm}, tuple(s[p] for p in perm))
        elif kind == "narrow" and s:
            dim = draw(st.integers(0, len(s) - 1))
            start = draw(st.integers(0, s[dim] - 1))
            length = draw(st.integers(1, s[dim] - start))
            push("narrow", [x], {"dim": dim, "start": start, "length": length}, s[:dim] + (length,) + s[dim + 1:])
        elif kind == "cat" and s:
            y = draw(st.sampled_from([r for r, t in values if t == s]))
            dim = draw(st.integers(0, len(s) - 1))
            push("cat", [x, y], {"dim": dim}, s[:dim] + (2 * s[dim],) + s[dim + 1:])
        elif kind == "cast":
            to = draw(st.sampled_from((torch.float16, torch.bfloat16, torch.int32, torch.float64)))
            push("cast", [x], {"dtype": to}, s)
        else:
            push("scale", [x], {"c": draw(st.sampled_from((0.5, -1.5, 2.0))),
                                "b": draw(st.sampled_from((0.0, 1.0, -0.25)))}, s)
    results = [r for r, _ in values if r[0] == "v"]
    if not results:
        push("relu", [values[0][0]], {}, base)
        results = [values[-1][0]]
    extra = draw(st.lists(st.sampled_from(results), max_size=2, unique=True))
    outputs = list(dict.fromkeys([results[-1]] + extra))
    return Program(in_shapes, [dtype] * len(in_shapes), steps, outputs)
