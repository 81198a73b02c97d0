"""`uniorch.compile(module)` is itself an nn.Module, as torch.compile's OptimizedModule is.

Code written for modules takes the compiled model where it took the model: an `nn.ModuleList` or a
parent module holding it, `isinstance(m, nn.Module)` checks in trainers, `.to()`, `.train()`,
`parameters()` and hooks registered on it. The model is its submodule `_orig_mod` (torch.compile's
name), so `named_parameters()` read `_orig_mod.<name>` as with torch.compile.

One difference from torch.compile, on purpose: `state_dict()` holds the model's own keys, without
the `_orig_mod.` prefix, so a checkpoint saved from the compiled model loads into the plain one.
`load_state_dict` takes either form (a torch.compile checkpoint's prefixed keys too), also when
the compiled model sits inside a parent module.
"""
from __future__ import annotations

import functools

from torch import nn

from torch.nn.modules import module as _nn_module

_PREFIX = "_orig_mod."
_has_global_hook = getattr(_nn_module, "_has_any_global_hook", lambda: True)


class ModuleFacade(nn.Module):
    """The nn.Module side of a compiled model: attributes and `training` read and written on the
    model, the model registered as `_orig_mod`, state dicts in the model's own keys."""

    def __init__(self, model: nn.Module):
        # before nn.Module's init: its `self.training = True` reaches the property below, which must
        # not put an eval-mode model back in training mode
        object.__setattr__(self, "_model", model)
        object.__setattr__(self, "_facade_ready", False)
        super().__init__()
        self._modules["_orig_mod"] = model
        self.register_load_state_dict_pre_hook(_prefixed_keys)

    def _finish_facade(self, model: nn.Module) -> None:
        """Last step of construction: `forward` with the model's signature (transformers' Trainer
        reads it to pick dataset columns), then attribute writes go to the model."""
        run = self._run

        @functools.wraps(model.forward)
        def forward(*args, **kwargs):
            return run(*args, **kwargs)

        object.__setattr__(self, "forward", forward)
        object.__setattr__(self, "_facade_forward", forward)
        object.__setattr__(self, "_facade_ready", True)

    def __call__(self, *args, **kwargs):
        # nn.Module's call path only where hooks on the compiled model need it: it costs about a
        # microsecond a call, a sizeable part of a small model's host time
        if (self._forward_hooks or self._forward_pre_hooks or self._backward_hooks or self._backward_pre_hooks
                or _has_global_hook()):
            return nn.Module.__call__(self, *args, **kwargs)
        forward = self.__dict__["forward"]
        if forward is not self.__dict__["_facade_forward"]:
            # replaced by a library around the compiled model (accelerate's mixed precision wraps
            # it in autocast): its wrapper runs, as nn.Module's call would; it calls ours
            return forward(*args, **kwargs)
        return self._run(*args, **kwargs)

    @property
    def __class__(self):
        """The model's class, as a transparent proxy reports it: `isinstance(compiled, type(model))`
        holds (type() still gives the compiled model's own class). Libraries branch on it:
        transformers' Trainer saves a `PreTrainedModel` with `save_pretrained` (config, tied
        weights), anything else as a bare state dict, which safetensors refuses when weights are
        tied (GPT-2's `lm_head` and `wte`): `trainer.save_model()` failed after training."""
        return type(self.__dict__["_model"])

    def _get_name(self) -> str:  # nn.Module's repr: the compiled model's own class name
        return type(self).__name__

    @property
    def training(self) -> bool:
        return self.__dict__["_model"].training

    @training.setter
    def training(self, value: bool) -> None:
        if self.__dict__["_facade_ready"]:
            self.__dict__["_model"].training = value

    def _own(self, name: str) -> bool:
        d = self.__dict__
        return not d["_facade_ready"] or name in d or hasattr(type(self), name)

    def __getattr__(self, name: str):
        d = self.__dict__
        if name == "_orig_mod":
            return d["_modules"]["_orig_mod"]
        model = d.get("_model")
        if model is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return model_attribute(self, model, name)

    def __setattr__(self, name: str, value) -> None:
        if self._own(name):
            object.__setattr__(self, name, value)
        else:  # `cm.scale = 2.0`: the model's attribute (its guard sees the change)
            setattr(self.__dict__["_model"], name, value)

    def __delattr__(self, name: str) -> None:
        if self._own(name):
            object.__delattr__(self, name)
        else:
            delattr(self.__dict__["_model"], name)

    def __dir__(self):
        own = super().__dir__()
        return sorted(set(own) | set(dir(self.__dict__["_model"])))

    def __len__(self) -> int:
        return len(self.__dict__["_model"])

    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        """The model's state dict, its keys without `_orig_mod.` (module docstring)."""
        out = self.__dict__["_model"].state_dict(*args, destination=destination, prefix=prefix, keep_vars=keep_vars)
        meta = getattr(out, "_metadata", None)
        if meta is not None:  # versions under the names loading looks them up by (BatchNorm's, ...)
            for key in [k for k in meta if k == prefix[:-1] or k.startswith(prefix)]:
                rest = key[len(prefix):] if prefix else key
                meta.setdefault(prefix + _PREFIX + rest if rest else prefix + _PREFIX[:-1], meta[key])
        return out


def model_attribute(compiled, model, name: str):
    """`model.<name>` as the compiled model's attribute: a method of the model returning the model
    (`.to(device)`, `.eval()`, a builder's `with_x()`) returns the compiled model, not the bare one
    (which would run uncompiled)."""
    value = getattr(model, name)
    if not (callable(value) and getattr(value, "__self__", None) is model):
        return value

    @functools.wraps(value)
    def method(*args, **kwargs):
        out = value(*args, **kwargs)
        return compiled if out is model else out
    return method


def _prefixed_keys(module, state_dict, prefix, *_):
    """Loading runs through `_orig_mod`: the model's own keys (ours, a plain model's) gain the
    prefix it looks them up by; keys that have it (a torch.compile checkpoint) stay."""
    for key in [k for k in state_dict if k.startswith(prefix) and not k[len(prefix):].startswith(_PREFIX)]:
        state_dict[prefix + _PREFIX + key[len(prefix):]] = state_dict.pop(key)
