"""The optimizer step compiled: `uniorch.compile(opt)` or `uniorch.compile(opt.step)`.

Each parameter group's update is one graph over the group's tensors: PyTorch's own single-tensor
update (`torch.optim.adam.adam`, `torch.optim.sgd.sgd`), traced with the group's parameters, grads
and state as inputs that it updates in place, and compiled like any model (capture, MLIR, fusion,
kernels). The learning rate enters as a 0-d tensor, so a scheduler changing it does not recompile;
the other hyperparameters are constants of the compile. Adam and AdamW take the `capturable` form of
the update (the step count is a tensor on the parameters' device and the bias corrections are
computed from it in the kernels), as torch.optim does when it captures the step into a graph.

What is not compiled runs the optimizer's own eager step, and `explain` says why: another optimizer
class, sparse or complex gradients, `differentiable=True`. SGD's first step with momentum is a graph
of its own (its buffers start as copies of the gradients, which the graph returns).
"""
from __future__ import annotations

import inspect
import warnings
import weakref
from typing import Any, Optional

import torch

_SGD_ARGS = ("weight_decay", "momentum", "dampening", "nesterov", "maximize")
COMPILED_UPDATES = (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD)  # exact classes: a subclass may change step()


class _AdamUpdate(torch.nn.Module):
    """Adam's update (AdamW's with `decoupled`) over lists of tensors, in place."""

    def __init__(self, hyper: dict, decoupled: bool):
        super().__init__()
        self.hyper, self.decoupled = hyper, decoupled

    def forward(self, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr):
        from torch.optim import adam

        kw = dict(self.hyper, foreach=False, capturable=True, lr=lr)
        if self.decoupled and "decoupled_weight_decay" in inspect.signature(adam.adam).parameters:
            kw["decoupled_weight_decay"] = True
            adam.adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, **kw)
        elif self.decoupled:  # torch before AdamW became Adam with decoupled weight decay
            from torch.optim import adamw

            adamw.adamw(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, **kw)
        else:
            adam.adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, **kw)


class _SGDUpdate(torch.nn.Module):
    """SGD's update over lists of tensors, in place (momentum buffers given)."""

    def __init__(self, hyper: dict):
        super().__init__()
        self.hyper = hyper

    def forward(self, params, grads, momentum_buffers, lr):
        from torch.optim import sgd

        # sgd multiplies by a learning-rate tensor that requires grad (its differentiable-lr form)
        # and reads any other one with .item(), which would make it a constant of the trace
        with torch.enable_grad():
            lr = lr.detach().requires_grad_()
        sgd.sgd(params, grads, momentum_buffers if self.hyper["momentum"] else [None] * len(params),
                foreach=False, lr=lr, **self.hyper)


class _SGDFirstUpdate(_SGDUpdate):
    """SGD's first step with momentum: the buffers start as copies of the gradients, made here and
    returned (torch.optim keeps them in the optimizer's state)."""

    def forward(self, params, grads, lr):
        bufs = [None] * len(params)
        super().forward(params, grads, bufs, lr)
        return bufs


class CompiledOptimizer:
    """What `uniorch.compile(optimizer)` returns: `step()` runs each parameter group's update as
    compiled kernels; every other attribute is the optimizer's."""

    def __init__(self, optimizer: torch.optim.Optimizer, target, fallback: str, cache_size_limit: int):
        self.optimizer = optimizer
        self._target, self._fallback, self._limit = target, fallback, cache_size_limit
        self._compiled: dict = {}  # (class, hyperparameters) -> CompiledModule of the update
        self.eager_steps: list[str] = []  # why a group's step ran eagerly, per such step (explain)
        self._last: Optional[tuple] = None  # (CompiledModule, args) of the last compiled group update
        self._lrs: dict = {}  # (value, device, dtype) -> the 0-d learning-rate tensor passed for it

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    @torch.no_grad()
    def step(self, closure=None):
        """The optimizer's step: its step hooks, then each group's compiled update; the optimizer's
        own eager step when some group cannot be compiled (`eager_steps` says why)."""
        opt = self.optimizer
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        plans = [self._plan(group) for group in opt.param_groups]
        why = next((p for p in plans if isinstance(p, str) and p), "")
        if why:
            self.eager_steps.append(why)
            opt.step()
            return loss
        from torch.optim import optimizer as optim_mod

        args, kwargs = (opt,), {}
        for hook in (*optim_mod._global_optimizer_pre_hooks.values(), *opt._optimizer_step_pre_hooks.values()):
            hook(opt, args, kwargs)
        for group, plan in zip(opt.param_groups, plans):
            if plan:
                cm, call_args = plan
                out = cm(*call_args)
                if isinstance(cm._model, _SGDFirstUpdate):  # the new momentum buffers
                    for p, buf in zip(call_args[0], out):
                        opt.state[p]["momentum_buffer"] = buf
                self._last = (cm, call_args)
        opt._optimizer_step_code()
        for hook in (*opt._optimizer_step_post_hooks.values(), *optim_mod._global_optimizer_post_hooks.values()):
            hook(opt, args, kwargs)
        opt._opt_called = True  # what an LR scheduler checks (its wrapper of step() sets it)
        return loss

    def _plan(self, group: dict):
        """(CompiledModule, its arguments) for the group's update; "" when the group has no
        gradients; or why it cannot be compiled."""
        opt = self.optimizer
        kind = type(opt)
        if kind not in COMPILED_UPDATES:
            return f"{kind.__name__} has no compiled update (Adam, AdamW and SGD have)"
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return ""
        if group.get("differentiable"):
            return "differentiable=True records the update for autograd"
        if any(p.grad.is_sparse or p.is_complex() for p in params):
            return "sparse or complex gradients"
        devices = {p.device for p in params}
        if len(devices) > 1:
            return f"parameters on several devices ({', '.join(map(str, devices))})"
        device = devices.pop()
        lr = group["lr"]
        lr = (lr.detach().to(device=device, dtype=torch.float32) if isinstance(lr, torch.Tensor)
              else self._lr_tensor(float(lr), device))
        grads = [p.grad for p in params]
        if kind is torch.optim.SGD:
            hyper = {k: group[k] for k in _SGD_ARGS}
            bufs = [opt.state[p].get("momentum_buffer") for p in params]
            first = bool(hyper["momentum"]) and all(b is None for b in bufs)
            if hyper["momentum"] and not first and any(b is None for b in bufs):
                return "SGD with momentum buffers for some parameters of a group only"
            if first:
                args = (params, grads, lr)
                update = lambda: _SGDFirstUpdate(hyper)  # noqa: E731
            else:
                args = (params, grads, bufs if hyper["momentum"] else [], lr)
                update = lambda: _SGDUpdate(hyper)  # noqa: E731
        else:
            hyper = {k: group[k] for k in ("amsgrad", "weight_decay", "eps", "maximize")}
            beta1, beta2 = group["betas"]
            if isinstance(beta1, torch.Tensor) or isinstance(beta2, torch.Tensor):
                return "betas given as tensors"
            hyper.update(beta1=beta1, beta2=beta2)
            decoupled = kind is torch.optim.AdamW or bool(group.get("decoupled_weight_decay"))
            state = [self._adam_state(p, hyper["amsgrad"], device) for p in params]
            args = (params, grads, [s["exp_avg"] for s in state], [s["exp_avg_sq"] for s in state],
                    [s["max_exp_avg_sq"] for s in state] if hyper["amsgrad"] else [],
                    [s["step"] for s in state], lr)
            update = lambda: _AdamUpdate(hyper, decoupled)  # noqa: E731
        key = (kind, tuple(sorted(hyper.items())), kind is torch.optim.AdamW, kind is torch.optim.SGD and first)
        cm = self._compiled.get(key)
        if cm is None:
            from ..api import CompiledModule

            cm = self._compiled[key] = CompiledModule(update(), self._target, self._fallback, self._limit)
            # `opt_k0_pointwise`, `opt1_...` for a second update: apart from the model's kernels in a profile
            cm.kernel_prefix = f"opt{len(self._compiled) - 1 or ''}_"
        return cm, args

    def _lr_tensor(self, value: float, device) -> torch.Tensor:
        """The learning rate as a 0-d tensor on the parameters' device, made once per value and
        made by a fill: `torch.tensor(value, device=...)` copies from host memory, and on a GPU
        such a copy waits for the stream to drain, every step: the step's host work then no longer
        overlaps the forward's and backward's kernels."""
        dtype = torch.get_default_dtype()
        key = (value, device, dtype)
        t = self._lrs.get(key)
        if t is None:
            if len(self._lrs) >= 64:  # a schedule's values: keep the table small
                self._lrs.clear()
            t = self._lrs[key] = torch.full((), value, dtype=dtype, device=device)
        return t

    def _adam_state(self, p: torch.Tensor, amsgrad: bool, device) -> dict:
        """The parameter's Adam state as torch.optim makes it, with the step count a float32 tensor
        on the parameter's device (its capturable form)."""
        state = self.optimizer.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=device)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if amsgrad:
                state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        step = state["step"]
        if step.device != device or step.dtype != torch.float32:
            state["step"] = step.to(device=device, dtype=torch.float32)
        if amsgrad and "max_exp_avg_sq" not in state:
            state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    def explain(self):
        """The report of the last compiled group update (kernels, bytes), with the eager steps'
        reasons as whole-step fallbacks."""
        from ..report import FallbackReport, Report

        if self._last is None:
            why = self.eager_steps[-1] if self.eager_steps else "step() has not run"
            return Report(target=str(self._target), kernels=[], timings={}, captured_ops=0, compiled_ops=0,
                          bytes_moved=0, bytes_minimum=0,
                          fallbacks=[FallbackReport("(optimizer step)", type(self.optimizer).__name__, "step", why)])
        cm, args = self._last
        with torch.no_grad():  # as step() runs it: the parameters are updated, not differentiated
            report = cm.explain(*args)
        for why in dict.fromkeys(self.eager_steps):
            report.fallbacks.append(FallbackReport("(optimizer step)", type(self.optimizer).__name__, "step", why))
        return report


def optimizer_of_step(fn) -> Optional[torch.optim.Optimizer]:
    """The optimizer whose `step` `fn` is: its bound method, or the wrapper an LR scheduler puts in
    its place (which holds the optimizer by a weak reference); else None."""
    if getattr(fn, "__name__", "") != "step" or isinstance(fn, torch.optim.Optimizer):
        return None
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, torch.optim.Optimizer):
        return owner
    if not getattr(fn, "_wrapped_by_lr_sched", False):
        # a user's own `def step(): ...; opt.step()` holds the optimizer too: a train step, not this
        return None
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if isinstance(value, weakref.ref):
            value = value()
        if isinstance(value, torch.optim.Optimizer):
            return value
    return None


def compile_step(optimizer: torch.optim.Optimizer, target, fallback: str, cache_size_limit: int) -> CompiledOptimizer:
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"expected a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if type(optimizer) not in COMPILED_UPDATES:
        warnings.warn(f"uniorch: {type(optimizer).__name__} has no compiled update (Adam, AdamW and SGD have); "
                      f"its step runs eagerly", stacklevel=3)
    return CompiledOptimizer(optimizer, target, fallback, cache_size_limit)
