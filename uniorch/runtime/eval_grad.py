"""Gradients through an eval-mode call made with grad enabled.

A model in eval mode called without `no_grad` is, for most users, inference: uniorch runs its
inference kernels (`training.needs_autograd`), which record no autograd graph. Eager PyTorch would
record one, since the parameters require grad, and some users train that way on purpose
(fine-tuning with BatchNorm frozen in eval mode). So the results of such a call require grad like
eager's, through `_RecomputedGrad`: the first backward that reaches them runs the call again in
PyTorch, with autograd, and takes the parameters' gradients from that; from then on the model's
calls take the training path (compiled forward and backward graphs). Inference pays nothing but a
flag check and a wrapper per call; before, a backward there raised "does not require grad", or,
beside another differentiable term, silently gave the parameters no gradient.
"""
from __future__ import annotations

import warnings
import weakref
from typing import Any

import torch
import torch.utils._pytree as pytree

# modules a backward reached through an eval-mode call: they train so (`training.needs_autograd`)
TRAINED_IN_EVAL: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()


def attach(model_or_fn: Any, out: Any, args: tuple, kwargs: dict) -> Any:
    """`out` of an inference-path call, its floating-point tensors requiring grad where eager's
    would: through the parameters of an eval-mode nn.Module that require grad, and through inputs
    that are such results themselves (compiled blocks of an eval-mode model, one after another)."""
    if not torch.is_grad_enabled():
        return out
    from ..capture.module_modes import owning_module

    model = owning_module(model_or_fn)
    params = [p for p in model.parameters() if p.requires_grad] if isinstance(model, torch.nn.Module) else []
    inputs = list({id(t): t for t in pytree.tree_leaves((args, kwargs))  # each once, in order
                   if isinstance(t, torch.Tensor) and t.requires_grad}.values())
    if not params and not inputs:
        return out
    leaves = _tensors(out)
    given = {id(t) for t in pytree.tree_leaves((args, kwargs))}  # an input returned as it is stays so
    # and eager's view of an input or a parameter (capture/input_views.py), made in the caller's grad
    # mode: it requires grad where eager's does, its graph reaching what it views
    roots = set()
    if any(t._is_view() for t in leaves):  # (most calls return none: the parameters are not walked)
        roots = {id(_root(t)) for t in [*pytree.tree_leaves((args, kwargs)), *params] if isinstance(t, torch.Tensor)}
    picks = [i for i, t in enumerate(leaves) if _differentiable(t) and id(t) not in given
             and not (t._is_view() and id(_root(t)) in roots)]
    if not picks:
        return out
    # the recomputation reads them at backward time: a change in between (an EMA, another
    # optimizer's step) would differentiate the new values, silently; eager uses the old ones
    versions = tuple(t._version for t in (*params, *inputs))
    call = (model_or_fn, model, args, kwargs, picks, len(params), len(inputs), versions)
    made = dict(zip(picks, _RecomputedGrad.apply(call, *[leaves[i] for i in picks], *params, *inputs)))
    count = iter(range(len(leaves)))
    return _rebuilt(out, lambda t: made.get(next(count), t))


def _root(t: torch.Tensor) -> torch.Tensor:
    return t._base if t._base is not None else t


def _tensors(x) -> list:
    """The tensors of a result, in order, through tuples, lists and dicts (transformers' outputs)
    only: any other object (a KV cache, often the caller's own, updated in place) is left whole."""
    if isinstance(x, torch.Tensor):
        return [x]
    if type(x) in (tuple, list) or isinstance(x, dict):
        return [t for v in (x.values() if isinstance(x, dict) else x) for t in _tensors(v)]
    return []


def _rebuilt(x, swap):
    """`x` with each tensor `_tensors` finds replaced by `swap(tensor)`, in the same order; a dict
    subclass (transformers' ModelOutput, made by this call) updated in place, keeping its type."""
    if isinstance(x, torch.Tensor):
        return swap(x)
    if type(x) in (tuple, list):
        return type(x)(_rebuilt(v, swap) for v in x)
    if isinstance(x, dict):
        if type(x) is dict:
            return {k: _rebuilt(v, swap) for k, v in x.items()}
        for k in list(x.keys()):
            x[k] = _rebuilt(x[k], swap)
    return x


def recomputed(t: torch.Tensor, model: Any) -> bool:
    """Whether `t` requires grad only as a result of such a call, and `model` is an eval-mode
    module no backward has reached yet: its call is inference too, the chain recomputed at once."""
    return (type(t.grad_fn) is _BACKWARD and isinstance(model, torch.nn.Module) and not model.training
            and model not in TRAINED_IN_EVAL)


def _differentiable(t) -> bool:
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()) and not t.requires_grad


class _RecomputedGrad(torch.autograd.Function):
    """Outputs computed by the kernels, as they are; their gradient with respect to the
    parameters and the inputs requiring grad from the same call recomputed eagerly (eval mode
    draws no randomness to replay)."""

    @staticmethod
    def forward(ctx, call, *tensors):
        ctx.call = call
        return tuple(t.detach() for t in tensors[:len(call[4])])

    @staticmethod
    def backward(ctx, *grads):
        fn, model, args, kwargs, picks, n_params, n_inputs, versions = ctx.call
        if isinstance(model, torch.nn.Module) and model not in TRAINED_IN_EVAL:
            TRAINED_IN_EVAL.add(model)
            warnings.warn(f"uniorch: a backward reached an eval-mode call of {type(model).__name__} made with grad "
                          f"enabled: its gradient was recomputed in PyTorch; later calls take the training path",
                          RuntimeWarning, stacklevel=2)
        params = [p for p in model.parameters() if p.requires_grad] if isinstance(model, torch.nn.Module) else []
        if len(params) != n_params:  # parameters frozen or unfrozen in between: none of them is sure
            raise RuntimeError("uniorch: the model's trainable parameters changed between its eval-mode call and "
                               "the backward through it")
        inputs = list({id(t): t for t in pytree.tree_leaves((args, kwargs))
                       if isinstance(t, torch.Tensor) and t.requires_grad}.values())
        if tuple(t._version for t in (*params, *inputs)) != versions:
            raise RuntimeError(
                f"uniorch: a parameter or input of an eval-mode call of {type(model).__name__} made with grad enabled "
                f"was modified in place before the backward through it; uniorch computes that gradient in PyTorch "
                f"at backward time, from the current values, which would be wrong. Call the model in train mode "
                f"(or keep the values until the backward) so the call records autograd as it runs")
        fresh: dict = {}  # each input requiring grad, as a leaf of the recomputation

        def leaf(t):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                return fresh.setdefault(id(t), t.detach().requires_grad_())
            return t

        args, kwargs = pytree.tree_map(leaf, (args, kwargs))
        wrt = params + list(fresh.values())
        with torch.enable_grad():
            leaves = _tensors(fn(*args, **kwargs))
        pairs = [(leaves[i], g) for i, g in zip(picks, grads)
                 if g is not None and isinstance(leaves[i], torch.Tensor) and leaves[i].requires_grad]
        got = [None] * len(wrt)
        if pairs:
            got = list(torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True))
        assert len(got) == n_params + n_inputs  # the same inputs, met in the same order as attach's
        return (None, *([None] * len(grads)), *got)


_BACKWARD = _RecomputedGrad._backward_cls


def takes_training_path(model_or_fn: Any, captured) -> bool:
    """Whether an eval-mode call with grad enabled must record autograd as it runs, rather than
    recompute its gradient at backward time: its graph draws random numbers (a VAE's noise, made
    in eval mode too), which a recomputation would draw anew. The model then takes the training
    path from this call on."""
    from ..capture.module_modes import owning_module

    model = owning_module(model_or_fn)
    if not isinstance(model, torch.nn.Module) or model.training or not _draws_random(captured):
        return False
    if not any(p.requires_grad for p in model.parameters()):
        return False
    TRAINED_IN_EVAL.add(model)
    return True


def _draws_random(captured) -> bool:
    draws = captured.__dict__.get("_draws_random")
    if draws is None:
        draws = captured.__dict__["_draws_random"] = any(
            n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
            and torch.Tag.nondeterministic_seeded in n.target.tags for n in captured.graph_module.graph.nodes)
    return draws
