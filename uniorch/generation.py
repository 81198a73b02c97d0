"""`compiled.generate(...)`: transformers' decoding loop with every forward call compiled.

generate calls the model's forward once for the prompt and once per new token. It is run with that
forward swapped, for the duration of the call, for one going through a compiled module:

- A wrapper may hand generate to a model inside it: peft's `PeftModel.generate` calls
  `base_model.generate`, whose loop calls the transformers model's forward, never the wrapper's.
  Swapping the wrapper's forward compiled nothing, and generate ran eagerly without a word. The
  forward swapped is the one of the module whose loop runs: the outermost transformers
  `GenerationMixin` (with peft's adapter layers inside it), compiled on its own.
- The swapped forward keeps the model's signature: generate passes only the inputs forward names
  (GPT-2's `position_ids`, which left padding shifts).
- An encoder-decoder (T5, BART, Whisper) runs its encoder once, through `get_encoder()`, before the
  loop: its forward is swapped too, for a compile of the encoder.
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable

from torch import nn


def decoding_module(model: Any) -> Any:
    """The module whose forward generate's loop calls: the model when it is a transformers
    generation model (or when transformers is absent), else the outermost one inside it."""
    try:
        from transformers import GenerationMixin
    except ImportError:
        return model
    if isinstance(model, GenerationMixin) or not hasattr(model, "modules"):
        return model
    return next((m for m in model.modules() if isinstance(m, GenerationMixin)), model)


def encoder_of(runner: Any) -> Any:
    """An encoder-decoder's encoder, which generate runs once before the loop
    (`get_encoder()`), or None."""
    config = getattr(runner, "config", None)
    if not getattr(config, "is_encoder_decoder", False) or not hasattr(runner, "get_encoder"):
        return None
    encoder = runner.get_encoder()
    return encoder if isinstance(encoder, nn.Module) and encoder is not runner else None


def generate_through(model: Any, swaps: list[tuple[Any, Callable]], args: tuple, kwargs: dict):
    """`model.generate(*args, **kwargs)` with each `module.forward` of `swaps` calling its compiled
    callable instead."""
    with contextlib.ExitStack() as stack:
        for module, compiled in swaps:
            stack.enter_context(_forward_through(module, compiled))
        return model.generate(*args, **kwargs)


@contextlib.contextmanager
def _forward_through(runner: Any, compiled: Callable):
    own = runner.__dict__.get("forward")  # an instance forward (a library's wrapper) comes back after
    original, inside = runner.forward, threading.local()

    @functools.wraps(original)
    def forward(*a, **k):
        # capture traces the model and an eager fallback runs it: both reach this forward again,
        # and must get the model's own
        if getattr(inside, "on", False):
            return original(*a, **k)
        inside.on = True
        try:
            return compiled(*a, **k)
        finally:
            inside.on = False

    # the guards look through it (capture/attribute_guard.py): each generate() installs another,
    # and guarded by identity the second generate() recompiled every spec, until the cache limit
    forward.uniorch_generate = True
    runner.forward = forward
    try:
        yield
    finally:
        if own is None:
            del runner.forward
        else:
            runner.forward = own
