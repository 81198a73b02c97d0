"""Opening a vendor's driver library with ctypes, preferring the copy the process already has.

torch loads the driver library (through its CUDA or HIP runtime) before any kernel runs; a second,
different copy opened by name would hold its own modules and contexts, so the mapped one wins.
"""
from __future__ import annotations

import ctypes
import os
from typing import Optional

from .sdk import BackendError


def mapped_path(prefix: str) -> Optional[str]:
    """The path of a library already mapped into this process whose file name starts with `prefix`."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if os.path.basename(path).startswith(prefix) and os.path.isfile(path):
                    return path
    except OSError:
        pass
    return None


def open_library(names: tuple[str, ...], what: str) -> ctypes.CDLL:
    """The first of `names` that loads (an already mapped copy of names[0] first), or a
    BackendError naming the library and why each attempt failed."""
    tried = []
    mapped = mapped_path(names[0].split(".so")[0] + ".so")
    for name in ([mapped] if mapped else []) + list(names):
        try:
            return ctypes.CDLL(name)
        except OSError as err:
            tried.append(f"{name}: {err}")
    raise BackendError(f"cannot load {names[0]}, {what}: " + "; ".join(tried))


class BoundCalls:
    """A library's functions with their ctypes prototypes set, each looked up once; a function the
    library lacks is a BackendError ending in `missing` (what to update)."""

    def __init__(self, lib: ctypes.CDLL, prototypes: dict, what: str, missing: str):
        self.lib, self._prototypes, self._what, self._missing = lib, prototypes, what, missing
        self._calls: dict = {}

    def __call__(self, name: str):
        fn = self._calls.get(name)
        if fn is None:
            try:
                fn = getattr(self.lib, name)
            except AttributeError:
                raise BackendError(f"{self._what} has no {name}; {self._missing}") from None
            fn.argtypes, fn.restype = self._prototypes[name]
            self._calls[name] = fn
        return fn


__all__ = ["BoundCalls", "mapped_path", "open_library"]
