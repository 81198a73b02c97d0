"""Every UNIORCH_* environment knob, in one place (README lists them). Read at use, never cached."""
from __future__ import annotations

import os

KNOBS = {
    "UNIORCH_TRACEBACK": "1: tools print Python tracebacks for internal errors (for bug reports)",
}


def flag(name: str) -> bool:
    assert name in KNOBS, f"undeclared knob {name}"
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")
