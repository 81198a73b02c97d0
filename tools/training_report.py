"""Training through uniorch over the model zoo: three steps against eager, per model.

    python -m uniorch.tools.training_report [--target interpret] [--models a,b] [--steps 3]
        [--optimizer sgd|adamw] [--precision fp32|bf16] [--out docs/perf/training.md]

Every zoo model with parameters is put in training mode and trained for `--steps` steps on fresh
random inputs (loss: the mean square of its floating outputs), once eagerly and once with
`uniorch.compile(model)` and the optimizer compiled too (`uniorch.compile(opt)`), from the same
weights. A row gives the largest relative error of the parameters after the last step (max-norm),
the forward and backward kernels and the share of each graph's ATen ops in kernels, the activation
bytes the forward saves for the backward beside eager autograd's, and the first call's time (capture
and compile of both graphs). A model the training path cannot take says why. Dropout modules get
p = 0: the compiled graph draws its masks from the generator in another order than eager, so the
runs could not be compared (tests/test_training.py checks dropout on its own).

`--precision bf16` is mixed precision as PyTorch users write it: fp32 parameters (the master
weights the optimizer updates) and the forward under `torch.autocast(dtype=torch.bfloat16)`, in
both runs; the bar is then 1e-2 instead of 1e-4. Rows also give the first step's gradients'
largest relative error, since a few SGD steps move parameters far less than their size, and the
same errors for torch.compile (Inductor) on that step: where two compilers round in other places
than eager does, this is the distance the reference compiler itself lands from eager.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import subprocess
import time
import warnings
from pathlib import Path

import torch
import torch.utils._pytree as pytree

import uniorch
from uniorch.testing import zoo


# a parameter whose gradient is zero in exact arithmetic (the key projection's bias, which softmax
# cannot see) holds rounding noise in both runs; below this size a difference is judged absolutely
ABS_FLOOR = 1e-6


def _loss(out):
    leaves = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()
              and t.requires_grad]
    return sum(t.float().pow(2).mean() for t in leaves)


def _optimizer(kind: str, params):
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    return torch.optim.SGD(params, lr=1e-2, momentum=0.9)


TOLERANCE = {"fp32": 1e-4, "bf16": 1e-2}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach() - b.detach()).abs().max() / b.detach().abs().max().clamp_min(ABS_FLOOR))


def _flat_grads(model) -> torch.Tensor:
    return torch.cat([p.grad.detach().flatten().double() for p in model.parameters() if p.grad is not None])


def _gradient_errors(model, ref, full, args, kwargs) -> dict:
    """The first step's gradients (all runs still at the same weights) against eager's.

    grad_rel_err is the worst parameter's max-norm error, each tensor's scale floored at a
    thousandth of the model's largest gradient. The gradients are also judged as one vector
    (grad_l2_err), and in bf16 both runs against the same step in fp32: compiled bf16 should be
    about as far from it as eager bf16 is.
    """
    pairs = [(p.grad, q.grad) for p, q in zip(model.parameters(), ref.parameters()) if q.grad is not None]
    # a tensor whose gradient is ~0 in exact arithmetic (a bias before a normalisation) holds only
    # rounding noise in both runs: it is judged against a thousandth of the model's largest gradient
    floor = 1e-3 * max((float(q.abs().max()) for _, q in pairs), default=0.0)
    out = {"grad_rel_err": max((float((p - q).abs().max() / max(float(q.abs().max()), floor, ABS_FLOOR))
                                for p, q in pairs), default=0.0)}
    g, g_ref = _flat_grads(model), _flat_grads(ref)
    if g.numel() != g_ref.numel():
        return out
    out["grad_l2_err"] = float((g - g_ref).norm() / g_ref.norm().clamp_min(1e-30))
    if full is not None:
        _loss(full(*args, **kwargs)).backward()
        g_full = _flat_grads(full)
        if g_full.numel() == g.numel():
            out["grad_l2_vs_fp32"] = float((g - g_full).norm() / g_full.norm().clamp_min(1e-30))
            out["eager_grad_l2_vs_fp32"] = float((g_ref - g_full).norm() / g_full.norm().clamp_min(1e-30))
    return out


def _inductor_gradient_errors(model, ref, args, kwargs, autocast) -> dict:
    """torch.compile's (Inductor's) first-step gradients against eager's, judged as ours are: in bf16
    two correct compilers round in other places than eager does, and this is how far the reference
    compiler lands from eager on the same step."""
    other = copy.deepcopy(model)
    for p in other.parameters():
        p.grad = None
    torch._dynamo.reset()
    try:
        with autocast():
            loss = _loss(torch.compile(other)(*args, **kwargs))
        loss.backward()
    except Exception as err:  # noqa: BLE001 - a row saying so, not the end of the report
        return {"inductor_error": f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"}
    finally:
        torch._dynamo.reset()
    errs = _gradient_errors(other, ref, None, args, kwargs)
    return {f"inductor_{k}": v for k, v in errs.items()}


def run_model(name: str, target: str, steps: int, optimizer: str, precision: str = "fp32") -> dict:
    model, args, kwargs = zoo.load(name)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        return {"model": name, "skipped": "no parameters"}
    model.train()
    for m in model.modules():  # see the module docstring: dropout's masks are not eager's
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p = 0.0
        elif isinstance(m, torch.nn.MultiheadAttention):
            m.dropout = 0.0
        for attr, value in list(vars(m).items()):  # transformers' attention keeps its p as a float
            if "dropout" in attr and isinstance(value, float):
                setattr(m, attr, 0.0)
    ref = copy.deepcopy(model)
    full = copy.deepcopy(model) if precision != "fp32" else None  # the first step once more in fp32
    start = copy.deepcopy(model) if precision != "fp32" else None  # and through torch.compile
    opt_ref = _optimizer(optimizer, ref.parameters())
    opt = uniorch.compile(_optimizer(optimizer, model.parameters()), target)
    cm = uniorch.compile(model, target)
    first = None
    row: dict = {"model": name}
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")  # noqa: E731
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(steps):
            a, k = zoo.fresh_inputs(args, kwargs, seed=100 + step)
            torch.manual_seed(step)  # dropout draws the same masks in both runs
            opt_ref.zero_grad()
            try:
                with autocast():
                    loss_ref = _loss(ref(*a, **k))
            except Exception as err:  # noqa: BLE001 - nothing to compare with
                return {"model": name, "skipped": f"eager PyTorch fails: {type(err).__name__}: {str(err)[:120]}"}
            loss_ref.backward()
            opt_ref.step()
            torch.manual_seed(step)
            opt.zero_grad()
            t = time.perf_counter()
            with autocast():
                loss = _loss(cm(*a, **k))
            loss.backward()
            if first is None:
                first = time.perf_counter() - t
            if step == 0:
                row.update(_gradient_errors(model, ref, full, a, k))
                if start is not None:
                    torch.manual_seed(step)
                    row.update(_inductor_gradient_errors(start, ref, a, k, autocast))
            opt.step()
    row["max_rel_err"] = max(_rel(p, q) for p, q in zip(model.parameters(), ref.parameters()))
    row["first_call_s"] = round(first, 2)
    tc = cm.training_compile
    if tc.failure or not tc.forward:
        row["eager"] = tc.failure or "no graph compiled"
        return row
    a, k = zoo.fresh_inputs(args, kwargs, seed=7)
    with autocast():
        rep = cm.explain(*a, **k)
    row.update(fw_kernels=len(rep.kernels), fw_compiled=round(rep.compiled_fraction, 3),
               bw_kernels=len(rep.backward.kernels) if rep.backward else None,
               bw_compiled=round(rep.backward.compiled_fraction, 3) if rep.backward else None,
               saved_bytes=rep.saved_bytes, eager_saved_bytes=rep.eager_saved_bytes,
               graphs=len(tc.forward), fallbacks=[f"{f.op}: {f.why[:100]}" for f in rep.fallbacks[:2]]
               + [f"backward {f.op}: {f.why[:100]}" for f in (rep.backward.fallbacks[:2] if rep.backward else [])])
    row["optimizer_eager"] = list(dict.fromkeys(opt.eager_steps))
    row["warnings"] = list(dict.fromkeys(str(w.message)[:160] for w in caught if "uniorch" in str(w.message)))[:2]
    return row


def markdown(rows: list[dict], gen: dict) -> str:
    bf16 = gen.get("precision") == "bf16"
    lines = ["# Training through uniorch", "",
             f"Generated by `python -m uniorch.tools.training_report{gen['flags']}` at commit {gen['commit']} on "
             f"{gen['date']} (torch {torch.__version__}, target {gen['target']}). Each model: {gen['steps']} steps of "
             f"{gen['optimizer']} (compiled with `uniorch.compile(opt)`) from eager's weights on fresh random inputs"
             + (", fp32 master weights with the forward under `torch.autocast(dtype=torch.bfloat16)` in both runs"
                if bf16 else "") + ". "
             "Param err: the parameters' largest relative error after the last step against eager's (max-norm, "
             "per tensor). Grad err: the first step's gradients' (per tensor, each tensor's scale at least a "
             "thousandth of the model's largest gradient), and grad L2: all of them as one vector" + ("; vs fp32: that step's gradients against the same step in fp32, compiled / eager" if bf16 else "")
             + ("; torch.compile: grad err / grad L2 of torch.compile's (Inductor's) first step against eager's, "
                "judged the same way" if bf16 else "")
             + ". Saved: the activation bytes the forward keeps for the backward (AOTAutograd's min-cut "
             "partition), eager autograd's beside it.", "",
             "| model | param err | grad err | grad L2 |" + (" vs fp32 | torch.compile |" if bf16 else "")
             + " fw kernels | fw in kernels | bw kernels | bw in kernels | saved KB | eager saved KB | first call (s) | notes |",
             "|---|---:|---:|---:|" + ("---:|---:|" if bf16 else "") + "---:|---:|---:|---:|---:|---:|---:|---|"]
    e = (lambda r, k: f"{r[k]:.1e}" if k in r else "")
    for r in rows:
        if "skipped" in r:
            continue
        if "error" in r:
            lines.append(f"| {r['model']} |" + " |" * (10 + 2 * bf16) + f" error: {r['error']} |")
            continue
        notes = "; ".join(r.get("fallbacks", []) + ([f"eager: {r['eager']}"] if r.get("eager") else [])
                          + [f"optimizer eager: {w}" for w in r.get("optimizer_eager", [])])
        kb = (lambda v: f"{v / 1024:.1f}" if isinstance(v, int) else "")
        vs = (f" {r['grad_l2_vs_fp32']:.1e} / {r['eager_grad_l2_vs_fp32']:.1e} |" if "grad_l2_vs_fp32" in r else " |") if bf16 else ""
        if bf16:
            vs += (f" {e(r, 'inductor_grad_rel_err')} / {e(r, 'inductor_grad_l2_err')} |" if "inductor_grad_rel_err" in r
                   else f" {r.get('inductor_error', '')} |")
        lines.append(f"| {r['model']} | {r['max_rel_err']:.1e} | {e(r, 'grad_rel_err')} | {e(r, 'grad_l2_err')} |{vs} "
                     f"{r.get('fw_kernels', '')} | {r.get('fw_compiled', '')} | "
                     f"{r.get('bw_kernels', '')} | {r.get('bw_compiled', '')} | {kb(r.get('saved_bytes'))} | "
                     f"{kb(r.get('eager_saved_bytes'))} | {r['first_call_s']} | {notes.replace('|', '/')} |")
    skipped = [r["model"] for r in rows if r.get("skipped") == "no parameters"]
    if skipped:
        lines += ["", f"Without parameters (nothing to train): {', '.join(skipped)}."]
    lines += [f"Not compared: {r['model']} ({r['skipped']})." for r in rows if r.get("skipped", "no parameters") != "no parameters"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="interpret")
    p.add_argument("--models", default="")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--optimizer", default="sgd", choices=("sgd", "adamw"))
    p.add_argument("--precision", default="fp32", choices=tuple(TOLERANCE))
    p.add_argument("--out", default="")
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    names = [n for n in a.models.split(",") if n] or zoo.names()
    rows = []
    for name in names:
        try:
            row = run_model(name, a.target, a.steps, a.optimizer, a.precision)
        except Exception as err:  # noqa: BLE001 - one model's failure is a row, not the end of the report
            row = {"model": name, "error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
        print(json.dumps(row), flush=True)
        rows.append(row)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parent).stdout.strip() or "unknown"
    flags = ((f" --target {a.target}" if a.target != "interpret" else "")
             + (f" --optimizer {a.optimizer}" if a.optimizer != "sgd" else "")
             + (f" --precision {a.precision}" if a.precision != "fp32" else ""))
    gen = {"commit": commit, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "target": a.target, "steps": a.steps, "optimizer": a.optimizer, "precision": a.precision, "flags": flags}
    if a.out:
        Path(a.out).write_text(markdown(rows, gen))
    if a.json:
        Path(a.json).write_text(json.dumps({"generated": gen, "rows": rows}, indent=1))
    tol = TOLERANCE[a.precision]
    bad = [r["model"] for r in rows if "error" in r or max(r.get("max_rel_err", 0), r.get("grad_rel_err", 0)) > tol]
    print(f"{len(rows)} models, {len(bad)} with errors above {tol:g} or failures: {', '.join(bad)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
