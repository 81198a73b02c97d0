"""A compiled function that runs a backward or steps an optimizer: a whole train step.

Capture runs the function once under export. A `loss.backward()` there ran the autograd engine
on the trace's tensors: parameters whose gradient it created kept a FakeTensor `.grad`, which the
real calls then never replaced (`opt.step()` moved nothing); an optimizer's first step left
FakeTensor state (Adam's `exp_avg`), and its updates ran on nothing. The graph export gives holds
neither the backward nor the optimizer's writes to Python objects.

Such a function goes through Dynamo instead, which splits it at the backward and at the step
(as `torch.compile(fn)` does) and hands each graph to uniorch. It is recognised before tracing
where its code names `backward`, or names `step` or `zero_grad` with an optimizer among its
globals and closure variables, so nothing in it runs twice (a batch drawn with `next(it)`); and
while tracing, where a backward or an optimizer step starts, before it changes anything.
"""
from __future__ import annotations

import types
from typing import Any, Optional

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from ..errors import StateWriteError
from . import user_code


def routed(reason: str) -> StateWriteError:
    """The error capture raises for a train step: the call goes through Dynamo (api.py)."""
    return StateWriteError(f"{reason}: a train step; it runs through Dynamo, split at the backward and the "
                           f"optimizer step, each graph compiled by uniorch")


class _TrainStep(Exception):
    """Raised where a traced call starts a backward or an optimizer step."""


def reason_before_tracing(model: Any) -> Optional[str]:
    """Why a plain function is a train step, from its code alone; None for a module or other code."""
    if isinstance(model, nn.Module) or not isinstance(getattr(model, "__code__", None), types.CodeType):
        return None
    names = set(user_code.code_names(model.__code__))
    if "backward" in names:
        return "the function calls backward()"
    if names & {"step", "zero_grad"}:
        for _, name, value in user_code.named_slots(model):
            if isinstance(value, torch.optim.Optimizer):
                return f"the function steps the optimizer {name}"
    return None


class Stop(torch.overrides.TorchFunctionMode):
    """While tracing: stops the trace at a backward or an optimizer step, and says which."""

    def __init__(self):
        super().__init__()
        self.seen: Optional[str] = None
        self._hook = None

    def __enter__(self):
        def step_hook(optimizer, args, kwargs):
            self.seen = f"the function steps an optimizer ({type(optimizer).__name__})"
            raise _TrainStep(self.seen)

        self._hook = register_optimizer_step_pre_hook(step_hook)
        return super().__enter__()

    def __exit__(self, *exc):
        self._hook.remove()
        return super().__exit__(*exc)

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        if func in (torch.Tensor.backward, torch.autograd.backward):
            self.seen = "the function calls backward()"
            raise _TrainStep(self.seen)
        return func(*args, **(kwargs or {}))
