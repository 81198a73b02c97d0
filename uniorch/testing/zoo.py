"""The model zoo as a library: load `tests/models/<name>.py`, draw fresh inputs, move a model to a
device and dtype, and judge a compiled result against eager PyTorch.

The test suite and the GPU session (`tools/bench/zoo_check.py`) share these, so a model judged
correct on the GPU is judged by the same rule as in CI. Each model file has `make()` returning
`(model, args)` or `(model, args, kwargs)`.
"""
from __future__ import annotations

import copy
import importlib.util
import math
import sys
from pathlib import Path
from typing import Any, Optional

import torch
import torch.utils._pytree as pytree

# next to the package in a source checkout (the GPU machine runs from one)
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "tests" / "models"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# relative error allowed against eager in the same dtype (max-norm); see `judge` for 16-bit types
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 1e-2, torch.float16: 1e-3}


def models_dir() -> Path:
    return DEFAULT_DIR


def names(folder: Optional[Path] = None) -> list[str]:
    folder = folder or models_dir()
    return sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))


def load(name: str, folder: Optional[Path] = None):
    """`(model, args, kwargs)` from the zoo file `name`.py (its own seed makes the weights)."""
    folder = folder or models_dir()
    path = folder / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no zoo model {name!r} in {folder} (known: {', '.join(names(folder))})")
    spec = importlib.util.spec_from_file_location(f"uniorch_zoo_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    # importable by name, as Dynamo (the training path) looks a traced function's module up
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    made = mod.make()
    model, args = made[0], tuple(made[1])
    kwargs = dict(made[2]) if len(made) > 2 and made[2] is not None else {}
    return model, args, kwargs


def fresh_like(value, gen: torch.Generator):
    """A new random value with the example's shape and dtype; non-tensors (captured as constants) stay."""
    if not isinstance(value, torch.Tensor):
        return value
    if value.dtype == torch.bool:
        # Keep at least one True per row so masks never hide a whole row (softmax over nothing is NaN).
        out = torch.rand(value.shape, generator=gen) < 0.7
        if out.dim() > 0 and out.numel() > 0:
            out[..., 0] = True
        return out
    if value.is_floating_point():
        return torch.randn(value.shape, generator=gen, dtype=value.dtype)
    lo, hi = int(value.min()), int(value.max()) + 1 if value.numel() else 1
    return torch.randint(lo, hi, value.shape, generator=gen, dtype=value.dtype)


def fresh_inputs(args, kwargs, seed: int):
    gen = torch.Generator().manual_seed(seed)
    return pytree.tree_map(lambda v: fresh_like(v, gen), (args, kwargs))


def to(tree, device, dtype: Optional[torch.dtype] = None):
    """Tensors of `tree` on `device`; floating ones cast to `dtype` when given (indices, masks stay)."""
    def move(v):
        if not isinstance(v, torch.Tensor):
            return v
        if dtype is not None and v.is_floating_point():
            return v.to(device=device, dtype=dtype)
        return v.to(device)
    return pytree.tree_map(move, tree)


def model_to(model: torch.nn.Module, device, dtype: Optional[torch.dtype] = None) -> torch.nn.Module:
    model = model.to(device)
    # .to(dtype) casts floating parameters and buffers only; BatchNorm's counters stay integers
    return model.to(dtype) if dtype is not None else model


def rel_errors(got, want, integers: str = "exact") -> tuple[float, float]:
    """(max |Δ| / max |want|, ‖Δ‖₂ / ‖want‖₂) over every floating output; integer and bool outputs
    must be equal (inf when not), or with `integers="fraction"` count as the fraction of their
    elements that differ. NaN in `got` where `want` has none is inf."""
    worst_max = worst_l2 = 0.0
    g_leaves, w_leaves = pytree.tree_leaves(got), pytree.tree_leaves(want)
    if len(g_leaves) != len(w_leaves):
        return math.inf, math.inf
    for g, w in zip(g_leaves, w_leaves):
        if not isinstance(w, torch.Tensor):
            if g != w:
                return math.inf, math.inf
            continue
        if not isinstance(g, torch.Tensor) or g.shape != w.shape:
            return math.inf, math.inf
        g, w = g.detach().cpu(), w.detach().cpu()
        if not w.is_floating_point() and not w.is_complex():
            if not torch.equal(g.to(w.dtype), w):
                if integers != "fraction":
                    return math.inf, math.inf
                frac = float((g.to(w.dtype) != w).double().mean())
                worst_max, worst_l2 = max(worst_max, frac), max(worst_l2, frac)
            continue
        g, w = g.double(), w.double()
        both_nan = torch.isnan(g) & torch.isnan(w)
        if bool((torch.isnan(g) ^ torch.isnan(w)).any()):
            return math.inf, math.inf
        d = torch.where(both_nan, torch.zeros_like(g), g - w)
        w = torch.where(both_nan, torch.zeros_like(w), w)
        scale = float(w.abs().max()) if w.numel() else 0.0
        worst_max = max(worst_max, float(d.abs().max()) / max(scale, 1e-12) if d.numel() else 0.0)
        norm = float(w.norm()) if w.numel() else 0.0
        worst_l2 = max(worst_l2, float(d.norm()) / max(norm, 1e-12) if d.numel() else 0.0)
    return worst_max, worst_l2


def _per_output(got, want) -> list[str]:
    """One line per output leaf: its path, dtype and relative error (integer outputs: how many
    elements differ), so a failure names the output that differs."""
    lines = []
    g_flat, _ = pytree.tree_flatten_with_path(got)
    w_flat, _ = pytree.tree_flatten_with_path(want)
    for (path, g), (_, w) in zip(g_flat, w_flat):
        where = pytree.keystr(path) or "out"
        if not isinstance(w, torch.Tensor) or not isinstance(g, torch.Tensor) or g.shape != w.shape:
            lines.append(f"{where}: {type(g).__name__} vs {type(w).__name__}")
            continue
        if not w.is_floating_point() and not w.is_complex():
            bad = int((g.detach().cpu().to(w.dtype) != w.detach().cpu()).sum())
            lines.append(f"{where}: {w.dtype}, {bad} of {w.numel()} elements differ")
        else:
            lines.append(f"{where}: {w.dtype}, rel_err {rel_errors(g, w)[0]:.2e}")
    return lines


def judge(got, eager, dtype: torch.dtype, reference64=None) -> dict[str, Any]:
    """Whether a compiled result is correct, and by how much.

    Within the dtype's tolerance of eager (max-norm) is correct. Otherwise, with a float64 run of the
    same model as `reference64`, Inductor's rule applies: the compiled result is correct when it is
    no further from float64 than eager itself is (times 2, plus the tolerance), since two roundings
    of a bf16 chain legitimately differ by more than bf16's epsilon from each other."""
    tol = TOLERANCE.get(dtype, 1e-4)
    err, err_l2 = rel_errors(got, eager)
    out = {"rel_err": err, "rel_err_l2": err_l2, "tolerance": tol, "rule": "eager"}
    out["correct"] = err <= tol
    if not out["correct"]:
        out["outputs"] = _per_output(got, eager)  # which output is off, and how
    if not out["correct"] and reference64 is not None and comparable(got, eager):
        # floating outputs by their l2 error; integer outputs by the fraction of elements that
        # differ: top-k indices among values that tie at 16-bit precision differ from float64's
        # choice in eager too, and then may in ours (at most twice as many); where eager's indices
        # are float64's, ours must be too
        mine, mine_int = _float_and_integer_errors(got, reference64)
        theirs, theirs_int = _float_and_integer_errors(eager, reference64)
        out.update(rule="fp64", err_vs_fp64=mine, eager_vs_fp64=theirs,
                   correct=mine <= 2 * theirs + tol and mine_int <= 2 * theirs_int)
        if mine_int or theirs_int:
            out.update(int_mismatch_vs_fp64=mine_int, eager_int_mismatch_vs_fp64=theirs_int)
    return out


def _float_and_integer_errors(got, want) -> tuple[float, float]:
    """(worst l2 relative error over floating outputs, worst fraction of differing elements over
    integer and bool outputs)."""
    floats = ints = 0.0
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want)):
        if isinstance(w, torch.Tensor) and isinstance(g, torch.Tensor) and g.shape == w.shape \
                and not w.is_floating_point() and not w.is_complex():
            g, w = g.detach().cpu(), w.detach().cpu()
            ints = max(ints, float((g.to(w.dtype) != w).double().mean()) if w.numel() else 0.0)
        else:
            floats = max(floats, rel_errors(g, w)[1])
    return floats, ints


def comparable(got, eager) -> bool:
    """Whether the float64 rule can judge `got`: same structure and shapes, no NaN where eager has
    none; integer outputs may differ (they are judged by how many differ)."""
    return math.isfinite(rel_errors(got, eager, integers="fraction")[0])


def run_eager(model, args, kwargs):
    """Eager's outputs on a copy, so stateful models (train-mode BatchNorm) keep their state."""
    with torch.no_grad():
        return copy.deepcopy(model)(*args, **kwargs)


__all__ = ["DTYPES", "TOLERANCE", "fresh_inputs", "fresh_like", "judge", "load", "model_to", "models_dir", "names",
           "rel_errors", "run_eager", "to"]
