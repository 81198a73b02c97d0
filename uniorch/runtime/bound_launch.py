"""Launches bound to one layout of a plan's inputs: the steady state of a static plan's calls.

A GPU launch through the launcher's direct path (backends/triton_launch.py) still builds, per
kernel and call, the argument list (each tensor and its strides), Triton's specialization key of
those arguments and a stream lookup: on H200 runs 3 and 5 a compiled call's host time was 50 to 100
us per kernel, against 7 us for Triton's launcher alone, and it set the time of every small bf16
workload (BERT layer: 0.89 ms for 0.35 ms of kernels). Inductor's generated wrapper calls each
launcher with the strides written into its code.

Every tensor a static plan launches with is an input, a view or slice of one, or a buffer the plan
allocates, so its strides and alignment follow from the inputs' own: the plan's `signature` (each
input tensor's strides and address modulo 16, and each other input's value). The first call with
a signature records each launch's tensors; the launcher binds them (`bind`: a function with the
grid, strides and constexprs in its code); later calls with that signature look the stream up
once and call the bound launches with the tensors alone. A launch the launcher does not bind
(the interpreter, the CPU backend, an autotuned kernel) goes the usual way.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

# signatures kept per plan: inputs that alternate between a few layouts keep their bindings;
# past this, new layouts launch the usual way instead of binding again (exec per kernel)
MAX_SIGNATURES = 8


def signature(inputs: list) -> tuple:
    """What the strides and alignment of every tensor a static plan launches with follow from."""
    return tuple([(t.data_ptr() & 15, t.stride()) if isinstance(t, torch.Tensor) else t for t in inputs])


@dataclass
class Record:
    """What a call to be bound did, filled in by the plan's steps (runtime/plan.py)."""

    key: tuple  # (device, signature)
    inputs: int
    launched: list = field(default_factory=list)  # (launch index, kernel, inputs, outputs)
    trace: list = field(default_factory=list)  # per step, what it decided (runtime/plan_code.py)


class BoundLaunches:
    """Per plan: (device, signature) -> (the bound launch of each launch step or None, the stream
    lookup, the whole call as code or None)."""

    def __init__(self, launches: int):
        self.launches = launches
        self.by_signature: dict = {}
        self.off = False  # this plan's launchers do not bind
        self.misses = 0  # calls recorded that bound nothing

    def begin(self, inputs: list, device) -> tuple:
        """(bound launches, stream, None, the call as code or None) for this call; or (None, None,
        record, None) when this call's launches are to be recorded, and bound after it (`finish`);
        or (None, None, None, None)."""
        if self.off:
            return None, None, None, None
        try:
            sig = (device, signature(inputs))
        except TypeError:  # an unhashable input: nothing to key on
            return None, None, None, None
        known = self.by_signature.get(sig)
        if known is not None:
            bound, current_stream, code = known
            stream = current_stream()
            return (bound, stream, None, code) if stream is not None else (None, None, None, None)
        if len(self.by_signature) >= MAX_SIGNATURES:
            return None, None, None, None
        return None, None, Record(sig, len(inputs)), None

    def finish(self, record: Record, steps: int, outputs: list[int]) -> None:
        """After a call that succeeded: bind what it launched, and write the call as code where
        every one of its `steps` said what it did (runtime/plan_code.py)."""
        from .plan_code import make_call

        bound: list = [None] * self.launches
        binds = False
        for index, kernel, ins, outs in record.launched:
            bind = getattr(kernel.fn, "bind", None)
            if bind is not None:
                binds = True
                try:
                    bound[index] = bind(ins, outs)
                except Exception:  # noqa: BLE001 - a launch that cannot be bound goes the usual way
                    bound[index] = None
        if all(b is None for b in bound):
            # none bound: launchers that cannot (off for good), or a first launch of these
            # arguments that went Triton's own way (the next call of the signature binds)
            self.misses += 1
            self.off = bool(record.launched) and (not binds or self.misses > MAX_SIGNATURES)
            return
        try:
            code = make_call(record.trace, steps, record.inputs, outputs, bound)
        except Exception:  # noqa: BLE001 - the steps run as they do without it
            code = None
        self.by_signature[record.key] = (bound, next(b for b in bound if b is not None).stream, code)

    def forget(self) -> None:
        """The plan's launches changed where they write (runtime/inplace.py): bind again."""
        self.by_signature.clear()


def bound_call(bound: list, index: int, stream, inputs: list, results: list) -> bool:
    """Launches step `index` through its bound launch, if it has one."""
    launch = bound[index]
    if launch is None:
        return False
    launch(stream, *inputs, *results)
    return True


__all__ = ["BoundLaunches", "Record", "signature", "MAX_SIGNATURES"]
