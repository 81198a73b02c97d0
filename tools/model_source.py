"""`file.py:factory` inputs: load the user's file, call the factory, report its failures as theirs."""
from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Any

from uniorch.ir.diagnostics import Diagnostic


class SourceError(Exception):
    def __init__(self, diags: list[Diagnostic]):
        super().__init__(diags[0].render() if diags else "")
        self.diags = diags


@dataclass
class ModelSource:
    path: str
    factory: str

    @staticmethod
    def parse(spec: str) -> "ModelSource | None":
        """`model.py:make` or `model.py` (factory `make`); None when `spec` is not a Python input."""
        path, sep, factory = spec.rpartition(":")
        if sep and path.endswith(".py"):
            return ModelSource(path, factory or "make")
        if spec.endswith(".py"):
            return ModelSource(spec, "make")
        return None

    def load(self) -> tuple[Any, tuple, dict]:
        if not os.path.isfile(self.path):
            raise SourceError([Diagnostic(f"could not open input file '{self.path}'")])
        name = "uniorch_user_" + os.path.splitext(os.path.basename(self.path))[0].replace("-", "_")
        spec = importlib.util.spec_from_file_location(name, self.path)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(self.path)))
        try:
            spec.loader.exec_module(module)
            factory = getattr(module, self.factory, None)
            if not callable(factory):
                found = sorted(k for k, v in vars(module).items() if callable(v) and getattr(v, "__module__", "") == name)
                raise SourceError([Diagnostic(f"'{self.path}' has no function '{self.factory}'"
                                              f" (functions defined there: {', '.join(found) or 'none'})",
                                              file=self.path, line=1, col=1)])
            result = factory()
        except SourceError:
            raise
        except BaseException as exc:  # the user's code failed: show their exception and their frames
            raise SourceError([user_exception(exc, self.path, f"while running '{self.path}:{self.factory}'")]) from None
        finally:
            sys.path.pop(0)
        return _unpack(result, self)


def _unpack(result: Any, src: ModelSource) -> tuple[Any, tuple, dict]:
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise SourceError([Diagnostic(f"factory '{src.factory}' must return (model, args) or (model, args, kwargs), "
                                      f"got {type(result).__name__}", file=src.path, line=1, col=1)])
    model, args = result[0], result[1]
    kwargs = result[2] if len(result) == 3 else {}
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    return model, args, dict(kwargs or {})


def _own_dirs() -> tuple[str, ...]:
    """Frames from these trees are machinery the user did not write: torch's and ours."""
    import torch
    import uniorch
    import uniorch.passes
    import uniorch.tools

    return tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch, uniorch, uniorch.passes, uniorch.tools))


def user_exception(exc: BaseException, user_file: str, context: str) -> Diagnostic:
    """An error located at the innermost frame of the user's own file, with their traceback as notes."""
    own = _own_dirs()
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<") and not os.path.abspath(f.filename).startswith(own)]
    user_file = os.path.abspath(user_file)
    mine = [f for f in frames if os.path.abspath(f.filename) == user_file]
    at = mine[-1] if mine else None
    diag = Diagnostic(f"{context}: {type(exc).__name__}: {exc}", file=at.filename if at else user_file,
                      line=at.lineno if at else 1, col=(at.colno or 0) + 1 if at else 1)
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        # the file does not parse: no frame of it ran, the place is in the exception itself
        diag.file, diag.line, diag.col = exc.filename, exc.lineno, exc.offset or 1
    for f in frames[-8:]:
        diag.notes.append(Diagnostic(f"called from {f.name}: {(f.line or '').strip()}", "note",
                                     f.filename, f.lineno, (f.colno or 0) + 1))
    return diag
