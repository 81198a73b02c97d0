"""MLIR diagnostics as `file:line:col: error: message`, the way mlir-opt prints them."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from torch_mlir import ir

_FILE_LOC = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)')


@dataclass
class Diagnostic:
    message: str
    severity: str = "error"  # error | warning | note | remark
    file: Optional[str] = None
    line: Optional[int] = None
    col: Optional[int] = None
    notes: list["Diagnostic"] = field(default_factory=list)
    raw_location: str = ""  # MLIR's location text, e.g. to find the FX nodes it names

    def render(self) -> str:
        where = f"{self.file}:{self.line}:{self.col}: " if self.file else ""
        text = f"{where}{self.severity}: {self.message}"
        return "\n".join([text] + [n.render() for n in self.notes])


def from_location(loc_text: str) -> tuple[Optional[str], Optional[int], Optional[int]]:
    """The innermost `file:line:col` inside an MLIR location's text (NameLoc, CallSiteLoc, …)."""
    m = _FILE_LOC.search(loc_text)
    if not m:
        return None, None, None
    return m.group(1), int(m.group(2)), int(m.group(3))


def from_mlir(diag) -> Diagnostic:
    """Converts an ir.DiagnosticInfo (a text buffer's locations say "-"; see `rebase`)."""
    file, line, col = from_location(str(diag.location))
    sev = str(diag.severity).rsplit(".", 1)[-1].lower()
    return Diagnostic(
        message=diag.message,
        severity=sev,
        file=file,
        line=line,
        col=col,
        notes=[from_mlir(n) for n in diag.notes],
        raw_location=str(diag.location),
    )


def from_error(err: ir.MLIRError) -> list[Diagnostic]:
    diags = [from_mlir(d) for d in err.error_diagnostics]
    return diags or [Diagnostic(message=str(err.message or err).strip())]


def rebase(diags: list[Diagnostic], source_name: str, line_offset: int = 0) -> list[Diagnostic]:
    """Names MLIR's anonymous text buffer ("-") after the real input, shifting split-file lines."""
    for d in diags:
        if d.file == "-":
            d.file, d.line = source_name, (d.line or 0) + line_offset
        rebase(d.notes, source_name, line_offset)
    return diags
