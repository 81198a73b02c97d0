"""Training-step workloads: forward, backward and an AdamW step, per compiler.

Each backend gets its own copy of the model from the same weights; one call of the step is
zero_grad, the loss (mean square of the output, in fp32), backward, and the optimizer's step, and
returns the gradients, so the first call's result is judged against eager's first step. Judged by
`rel_error` over all gradients at once: a parameter whose gradient is zero in exact arithmetic (an
attention key's bias) holds rounding noise in both runs, which a per-tensor scale would inflate,
and which AdamW's first step turns into a full ±lr move of either sign (so the parameters after it
are no measure).
What each compiler compiles is what its users would: eager runs as is; torch.compile wraps the
model and the optimizer's step (PyTorch's recipe for compiled optimizers); uniorch compiles the
model and the optimizer (`uniorch.compile(opt)`).
"""
from __future__ import annotations

import copy

import torch

LR = 1e-3


class TrainStep:
    def __init__(self, backend: str, model: torch.nn.Module, device: str):
        self.model = copy.deepcopy(model).train()
        opt = torch.optim.AdamW(self.model.parameters(), lr=LR)
        if backend == "eager":
            self.forward, self.opt, self.step_fn = self.model, opt, opt.step
        elif backend.startswith("inductor"):
            mode = "max-autotune" if backend == "inductor_max_autotune" else None
            self.forward = torch.compile(self.model, mode=mode) if mode else torch.compile(self.model)
            self.opt, self.step_fn = opt, torch.compile(opt.step)
        elif backend in ("uniorch", "uniorch_autotune"):
            import uniorch

            target = "interpret" if device == "cpu" else "auto"
            self.forward = uniorch.compile(self.model, target)
            self.opt = uniorch.compile(opt, target)
            self.step_fn = self.opt.step
            if backend == "uniorch_autotune":  # the first step compiles both halves: tuned then
                from .backends import FirstCallTuned

                self.forward = FirstCallTuned(self.forward)
        else:
            raise ValueError(f"no training step for backend {backend!r}")

    def __call__(self, *args):
        with torch.enable_grad():
            self.opt.zero_grad(set_to_none=True)
            loss = self.forward(*args).float().pow(2).mean()
            loss.backward()
            self.step_fn()
        return [p.grad for p in self.model.parameters() if p.grad is not None]

    def explain(self, *args):
        """The compiled model's report for these inputs (forward, and backward under `.backward`)."""
        with torch.enable_grad():
            return self.forward.explain(*args)


def rel_error(got, ref) -> float:
    """max |got - ref| / max |ref| over all gradients together."""
    if len(got) != len(ref) or any(g.shape != r.shape for g, r in zip(got, ref)):
        return float("inf")
    if any(bool(torch.isnan(g).any()) for g in got):
        return float("nan")
    scale = max(float(r.abs().max()) for r in ref) or 1.0
    return max(float((g.float() - r.float()).abs().max()) for g, r in zip(got, ref)) / scale


def step_flops(model: torch.nn.Module, args) -> int:
    """Matmul/convolution FLOPs of one forward and backward (the optimizer's elementwise work is
    not counted, as elementwise work is not elsewhere)."""
    from torch.utils.flop_counter import FlopCounterMode

    m = copy.deepcopy(model).train()
    with FlopCounterMode(display=False) as counter, torch.enable_grad():
        m(*args).float().pow(2).mean().backward()
    return int(counter.get_total_flops())
