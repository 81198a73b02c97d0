"""`uniorch.compile(model, freeze=True)`: parameters' and buffers' layout copies made once.

A kernel that reads a factor in another layout gets a copy before each launch (runtime/relayout.py):
on a GPU, a convolution's [out, in, kh, kw] filters laid out channels-last, as PyTorch's own
cuDNN path copies them per call for a channels-last input. For a network's weights that is most
of its traffic at small batches: ResNet-18 in bf16 at batch 8 reads and writes its 3x3 filters'
22 MB twice each call (44 of the 169 MB explain counts for sm_90), and launches a copy per
convolution. Frozen, as Inductor's `freezing` treats weights as constants, the copy of a
registered tensor is kept and reused while that tensor's storage, view and version counter are
unchanged: an in-place update (an optimizer step, `load_state_dict`, `p.mul_()` under no_grad)
bumps the counter, and the next call copies again. Writes the counter does not see (through
`.data`, numpy or DLPack) are not noticed either: the contract Inductor's freezing states.

Not while a CUDA graph is captured: the graph replays its own copy, as without freezing (a cached
copy read by a graph would not follow a later in-place update of the weight).
"""
from __future__ import annotations

import threading
import weakref
from typing import Callable, Iterable

import torch

# reentrant: a registered tensor's death callback (_drop) can run inside a locked block, when an
# allocation there triggers the cycle collector
_LOCK = threading.RLock()
# storage address -> a weak reference to a registered tensor on that storage (alive: the address
# is that storage's, as no two live storages share one)
_REGISTERED: dict[int, weakref.ref] = {}
# (storage address, data_ptr, shape, strides, dtype, order) -> (version, the copy)
_COPIES: dict[tuple, tuple[int, torch.Tensor]] = {}


def register(tensors: Iterable) -> int:
    """Marks `tensors` (a model's parameters and buffers) frozen; returns how many."""
    n = 0
    with _LOCK:
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.numel() > 0:
                at = _storage(t)
                _REGISTERED[at] = weakref.ref(t, lambda _ref, at=at: _drop(at, _ref))
                n += 1
    return n


def register_module(model) -> int:
    """register() for an nn.Module's parameters and buffers (nothing for a plain function)."""
    if not isinstance(model, torch.nn.Module):
        return 0
    return register(list(model.parameters()) + list(model.buffers()))


def frozen(t: torch.Tensor) -> bool:
    """Whether `t` lies in a registered tensor's storage."""
    if not _REGISTERED:
        return False
    ref = _REGISTERED.get(_storage(t))
    owner = ref() if ref is not None else None
    return owner is not None and _storage(owner) == _storage(t)


def copy_of(t: torch.Tensor, order, make: Callable[[], torch.Tensor]) -> torch.Tensor:
    """`make()` (t laid out in dim order `order`), kept for a frozen `t` and returned again while
    its storage, view and version are those it was made from."""
    if not frozen(t) or (t.is_cuda and torch.cuda.is_current_stream_capturing()):
        return make()
    key = (_storage(t), t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, tuple(order))
    version = t._version
    with _LOCK:
        hit = _COPIES.get(key)
    if hit is not None and hit[0] == version:
        return hit[1]
    with torch.no_grad():  # kept: no autograd graph holding the parameter alive
        out = make()
    with _LOCK:
        _COPIES[key] = (version, out)  # the copy of an older version goes
    return out


def forget() -> None:
    """Drops every registration and kept copy (tests; a process reusing its memory for new weights
    re-registers them when it compiles with freeze=True)."""
    with _LOCK:
        _REGISTERED.clear()
        _COPIES.clear()


def _drop(at: int, ref) -> None:
    """A registered tensor died: its registration and copies go (its memory may hold new ones)."""
    with _LOCK:
        if _REGISTERED.get(at) is ref:
            del _REGISTERED[at]
            for key in [k for k in _COPIES if k[0] == at]:
                del _COPIES[key]


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


__all__ = ["register", "register_module", "frozen", "copy_of", "forget"]
