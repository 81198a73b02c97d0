"""The train/eval flags of a model's modules, and its parameters' dtypes and devices, as part of
a compile's guard.

A capture records one mode's graph: dropout and BatchNorm's batch statistics in training mode,
neither in eval mode, and any module may branch on `self.training` (transformers' attention
passes its dropout only when training). A call after `model.eval()` or `model.train()` must not
reuse the other mode's compile (torch.compile's Dynamo guards each module's flag alike).

Only modules whose forward can read the flag are checked: exact instances of torch.nn classes
that never do are left out (a transformer's Linear, LayerNorm and activation modules, most of
its modules), so the check costs a few microseconds a call on a GPT-2 (162 modules, 74 checked).
"""
from __future__ import annotations

import functools
import operator
from typing import Optional

import torch
from torch import nn

from .nested_encoder import may_nest

_TRAINING = operator.attrgetter("training")

# forward never reads self.training (a subclass may: only exact types are left out)
_MODE_FREE = {
    nn.Linear, nn.Bilinear, nn.Identity, nn.Flatten, nn.Unflatten, nn.Embedding, nn.EmbeddingBag,
    nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d,
    nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm,
    nn.Sequential, nn.ModuleList, nn.ModuleDict, nn.ParameterList, nn.ParameterDict,
    nn.ReLU, nn.ReLU6, nn.GELU, nn.SiLU, nn.Mish, nn.Tanh, nn.Sigmoid, nn.Hardswish, nn.Hardsigmoid,
    nn.Hardtanh, nn.LeakyReLU, nn.ELU, nn.CELU, nn.SELU, nn.GLU, nn.PReLU, nn.Softplus, nn.Softsign,
    nn.Tanhshrink, nn.Softmax, nn.LogSoftmax, nn.Softmin, nn.LogSigmoid, nn.Threshold,
    nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d,
    nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d,
    nn.AdaptiveMaxPool1d, nn.AdaptiveMaxPool2d, nn.AdaptiveMaxPool3d, nn.LPPool1d, nn.LPPool2d,
    nn.Upsample, nn.PixelShuffle, nn.PixelUnshuffle, nn.ZeroPad2d, nn.ConstantPad1d, nn.ConstantPad2d,
    nn.ReflectionPad1d, nn.ReflectionPad2d, nn.ReplicationPad1d, nn.ReplicationPad2d,
    nn.CosineSimilarity, nn.PairwiseDistance,
}
if hasattr(nn, "RMSNorm"):
    _MODE_FREE.add(nn.RMSNorm)
# transformers' own, by name (importing transformers to get the classes would cost seconds)
_MODE_FREE_NAMES = {"transformers.pytorch_utils.Conv1D"}
_MODE_FREE_MODULES = {"transformers.activations"}  # activation functions only


def mode_free(m: nn.Module) -> bool:
    """Whether `m` is of a class whose forward never reads `self.training` (nor anything one would set)."""
    t = type(m)
    return (t in _MODE_FREE or t.__module__ in _MODE_FREE_MODULES
            or f"{t.__module__}.{t.__qualname__}" in _MODE_FREE_NAMES)


class ModuleModes:
    """`tag()`: a string naming the current flags of the modules that matter, equal exactly for
    equal flags: "train" or "eval" when they all agree, else "mixed <bits> (training: names)"."""

    def __init__(self, model: nn.Module):
        self._root = model
        self._watched = [m for m in model.modules() if not mode_free(m)]
        self._tags: dict[tuple, str] = {}
        _count_conversions()
        self._seen = _conversions[0]
        self._params = _tensors_meta(model)
        self._params_tag = ""
        self._params_tags: dict[tuple, str] = {self._params: ""}  # as compiled first: no tag
        # an encoder eager runs on nested tensors without autograd (nested_encoder.py): its padded
        # rows depend on the grad mode
        self._grad_tagged = may_nest(model)

    def tag(self) -> str:
        if _conversions[0] != self._seen:  # a module was converted (.to(), .half(), .cuda()) since
            self._seen = _conversions[0]
            meta = _tensors_meta(self._root)
            if meta != self._params:
                self._params = meta
                tag = self._params_tags.get(meta)
                if tag is None:
                    tag = self._params_tags[meta] = f"{PARAMS}{len(self._params_tags)} ({_describe(meta)})"
                self._params_tag = tag
        tag = self._modes_tag() + self._params_tag
        if self._grad_tagged:
            tag += GRAD + ("on" if torch.is_grad_enabled() else "off")
        return tag

    def _modes_tag(self) -> str:
        flags = tuple(map(_TRAINING, self._watched))
        tag = self._tags.get(flags)
        if tag is None:
            if all(flags):
                tag = "train"
            elif not any(flags):
                tag = "eval"
            else:
                names = {id(m): n for n, m in self._root.named_modules()}
                training = [names.get(id(m), "?") or "(model)" for m, f in zip(self._watched, flags) if f]
                more = f" and {len(training) - 4} more" if len(training) > 4 else ""
                bits = "".join("1" if f else "0" for f in flags)  # the key: names alone could collide
                tag = f"mixed {bits} (training: {', '.join(training[:4])}{more})"
            if len(self._tags) < 64:
                self._tags[flags] = tag
        return tag


def module_modes(model) -> Optional[ModuleModes]:
    """The flags to guard for `model`; None for a function, or for a graph Dynamo captured (its
    own guards cover the modes)."""
    model = owning_module(model)
    if not isinstance(model, nn.Module) or isinstance(model, torch.fx.GraphModule):
        return None
    return ModuleModes(model)


def owning_module(model):
    """The module itself for a method bound to one (`uniorch.compile(model.forward)`), else `model`."""
    owner = getattr(model, "__self__", None)
    return owner if isinstance(owner, nn.Module) and not isinstance(model, nn.Module) else model


SEP = " |modes="
PARAMS = " |params="
AUTOCAST = " |autocast="
GRAD = " |grad="
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: True)


def autocast_tag() -> str:
    """The autocast regions a call runs in ("" for none): under `torch.autocast` the capture casts
    as eager does, another graph."""
    if not _any_autocast():
        return ""
    on = [f"{d}:{str(torch.get_autocast_dtype(d)).removeprefix('torch.')}" for d in ("cpu", "cuda")
          if torch.is_autocast_enabled(d)]
    return AUTOCAST + ",".join(on) if on else ""


def split_modes(tree: str) -> tuple[str, str]:
    """A guard key's structure and the modes tag folded into it ("" if none)."""
    base, sep, tag = tree.partition(SEP)
    return base, tag


def split_grad(tag: str) -> tuple[str, str]:
    """A modes tag without its grad mode part, and that part ("" where the model's has none)."""
    rest, _, grad = tag.partition(GRAD)
    return rest, grad


def split_params(tag: str) -> tuple[str, str]:
    """A modes tag's train/eval part and its parameters' part ("" while they are as compiled first)."""
    modes, sep, params = tag.partition(PARAMS)
    return modes, params


def split_autocast(tag: str) -> tuple[str, str]:
    """A tag's modules part and its autocast part ("" outside autocast)."""
    modes, sep, amp = tag.partition(AUTOCAST)
    return modes, amp


# Parameters and buffers converted or replaced after a compile (model.to(torch.bfloat16), .half(),
# .cuda(), load_state_dict(..., assign=True)):
# the kernels were compiled for the old dtypes and devices. Checking every parameter's metadata
# each call costs 10-15 us on a GPT-2 (148 tensors), so each call compares one counter, which
# nn.Module._apply (every conversion goes through it) moves, and only then the tensors.
_conversions = [0]


def _count_conversions() -> None:
    apply = nn.Module._apply
    if getattr(apply, "_uniorch_counts", False):
        return

    @functools.wraps(apply)
    def _apply(self, *args, **kwargs):
        if not torch.compiler.is_compiling():  # see `registered`
            _conversions[0] += 1
        return apply(self, *args, **kwargs)

    _apply._uniorch_counts = True
    nn.Module._apply = _apply
    # a parameter or buffer set anew (`model.fc.weight = nn.Parameter(...)`, load_state_dict's
    # assign=True): PyTorch's own registration hooks

    def registered(*_):
        # not while Dynamo traces a forward that reassigns a buffer (`self.count += 1`, spectral
        # norm): it guarded on this counter, so every training step recompiled, and from the
        # cache limit on ran eagerly, in torch.compile's own models too. Its replay of the write
        # after the graph calls this hook in Python, which counts.
        if not torch.compiler.is_compiling():
            _conversions[0] += 1

    from torch.nn.modules import module as nn_module

    nn_module.register_module_parameter_registration_hook(registered)
    nn_module.register_module_buffer_registration_hook(registered)


def _tensors_meta(model: nn.Module) -> tuple:
    return tuple((t.dtype, t.device, tuple(t.shape)) for t in (*model.parameters(), *model.buffers()))


def _describe(meta: tuple) -> str:
    kinds = sorted({f"{str(d).removeprefix('torch.')} on {dev}" for d, dev, _ in meta})
    return ", ".join(kinds[:3]) + (" and more" if len(kinds) > 3 else "")
