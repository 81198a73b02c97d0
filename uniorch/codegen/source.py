"""What codegen hands the runtime: one kernel's Triton source and how to launch it."""
from __future__ import annotations

import functools
import re

from dataclasses import dataclass, field
from typing import Any

from uniorch.errors import UniorchError


class CodegenError(UniorchError):
    """An op of a kernel cannot be turned into Triton; its region runs eagerly instead."""

    def __init__(self, op: Any, reason: str):
        self.op_name = getattr(op, "name", None) or str(op)
        self.location = str(getattr(op, "location", "")) if op is not None else ""
        super().__init__(f"cannot generate Triton for '{self.op_name}': {reason}")


@dataclass
class KernelSource:
    """A generated kernel.

    `source` is a Python module text defining `fn_name` with `@jit` (injected by the loader).
    Arguments, in order: per input then per result, its pointer then one stride per dimension;
    then `constexprs` by keyword. `grid` is the launch grid. `num_warps`/`num_stages` go to Triton.
    """

    name: str
    fn_name: str
    source: str
    input_ranks: list[int]
    output_ranks: list[int]
    grid: tuple[int, ...]
    constexprs: dict[str, int] = field(default_factory=dict)
    num_warps: int = 4
    num_stages: int = 1
    # Triton signature types per pointer argument (e.g. "*fp32"), inputs then results; strides are "i64".
    pointer_types: list[str] = field(default_factory=list)
    # size symbols (uniorch/ir/dims.py) passed after the tensors, each read off a tensor's dim at
    # launch: (tensor index over inputs then results, dim); the grid may then hold expressions
    symbols: list[str] = field(default_factory=list)
    symbol_dims: list[tuple[int, int]] = field(default_factory=list)
    # [(input index, dim order)]: inputs the launch plan lays out anew (that order, the last dim
    # innermost) before the launch, where the kernel reads them faster so
    # (codegen/fma_relayout.py); the same values, only their strides change
    relayout: list = field(default_factory=list)
    # per runtime argument, the specialization it was compiled for, in Triton's JIT terms
    # (backends/specialization.py): "1" (compiled in), "i32"/"i64" with "D" when divisible by 16,
    # "*D" for a 16-byte aligned pointer. Empty: compiled for any values (an AOT kernel's generic form)
    specialization: list = field(default_factory=list)

    def size_args(self, inputs: list, outputs: list, sizes: list | None = None) -> list[int]:
        """The symbols' values for one launch: `sizes` as the launch plan gives them, else read off
        the tensors (a symbol no tensor dim is alone needs the plan's)."""
        if sizes is not None:
            return [int(v) for v in sizes]
        tensors = list(inputs) + list(outputs)
        if any(t < 0 for t, _ in self.symbol_dims):
            raise UniorchError(f"kernel {self.name}: the values of its size symbols {self.symbols} must be given")
        return [int(tensors[t].shape[d]) for t, d in self.symbol_dims]

    def launch_grid(self, values: list[int]) -> tuple[int, ...]:
        """The grid for these symbol values (the grid itself when no entry is symbolic)."""
        if not self.symbols:
            return tuple(self.grid)
        from uniorch.ir import dims

        env = dict(zip(self.symbols, values))
        grid = tuple(max(1, dims.evaluate(g if isinstance(g, int) else dims.parse(str(g)), env)) for g in self.grid)
        if any(g > 65535 for g in grid[1:]):
            raise UniorchError(f"kernel {self.name}: grid {grid} at sizes {env} exceeds 65535 programs on "
                               f"its second or third axis")
        return grid

    def signature(self) -> dict[str, str]:
        """Triton `ASTSource` signature: argument name -> type (strides i64, blocks constexpr)."""
        if not self.pointer_types:
            raise ValueError(f"kernel {self.name}: pointer_types not set")
        sig = {}
        ranks = self.input_ranks + self.output_ranks
        names = list(self.arg_names())
        i = 0
        for ptype, rank in zip(self.pointer_types, ranks):
            sig[names[i]] = ptype
            i += 1
            for _ in range(rank):
                sig[names[i]] = "i64"
                i += 1
        for k in self.symbols:
            sig[k] = "i64"
        for name, key in zip(names, self.specialization):
            if key == "1":
                sig[name] = "constexpr"
            elif not key.startswith("*"):
                sig[name] = key.rstrip("D")
        for k in self.constexprs:
            sig[k] = "constexpr"
        return sig

    def compile_constexprs(self) -> dict[str, int]:
        """The values compiled in: the block sizes, and runtime arguments specialized to 1."""
        names = self.arg_names()
        return {**{names[i]: 1 for i, key in enumerate(self.specialization) if key == "1"}, **self.constexprs}

    def divisible_args(self) -> list[int]:
        """Indices of the runtime arguments compiled as 16-byte aligned or divisible by 16."""
        return [i for i, key in enumerate(self.specialization) if key.endswith("D")]

    def arg_names(self) -> list[str]:
        return tensor_params(self.input_ranks, self.output_ranks) + list(self.symbols)

    def body_digest(self) -> str:
        """The source's digest without the kernel's name, comments and docstring: two kernels
        with one digest are the same code (a model's repeated layers: only their names and the
        source locations in comments differ), which Triton would otherwise compile once each."""
        return _body_digest(self.source, self.fn_name)


@functools.lru_cache(maxsize=4096)
def _body_digest(source: str, fn_name: str) -> str:
    import hashlib
    import io
    import tokenize

    skip = (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING)
    parts, first = [], True
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in skip:
            continue
        if first and tok.type == tokenize.STRING:  # the module docstring names the kernel
            first = False
            continue
        first = False
        parts.append("\x00kernel" if tok.type == tokenize.NAME and tok.string == fn_name else tok.string)
        parts.append(str(tok.type))
    return hashlib.sha256("\x01".join(parts).encode()).hexdigest()[:24]


def symbol_dims(op, symbols: list[str], shapes: list[list]) -> list[tuple[int, int]]:
    """Where each size symbol can be read at launch: a tensor dim (inputs then results) that is the
    symbol itself, or (-1, -1) when it is only ever inside a product (the launch plan passes it)."""
    found: dict[str, tuple[int, int]] = {}
    for t, shape in enumerate(shapes):
        for d, n in enumerate(shape):
            if not isinstance(n, int) and n.is_Symbol:
                found.setdefault(str(n), (t, d))
    return [found.get(s, (-1, -1)) for s in symbols]  # (-1, -1): only the launch plan knows it


def tensor_params(in_ranks: list[int], out_ranks: list[int]) -> list[str]:
    """A kernel's tensor parameters: pointer then one stride per dim, inputs then outputs."""
    names = []
    for prefix, ranks in (("in", in_ranks), ("out", out_ranks)):
        for i, rank in enumerate(ranks):
            names.append(f"{prefix}{i}_ptr")
            names.extend(f"{prefix}{i}_s{d}" for d in range(rank))
    return names


def kernel_ident(name: str) -> str:
    """A kernel name as a Python identifier."""
    fn = re.sub(r"\W", "_", name)
    return fn if fn and not fn[0].isdigit() else "k_" + fn
