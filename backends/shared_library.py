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


__all__ = ["mapped_path", "open_library"]
