"""Cephes' series evaluations (polevl, chbevl) as Triton source text, unrolled over their
coefficients; shared by the special-function ports (special.py, special_igamma.py)."""
from __future__ import annotations


def horner(var: str, coeffs) -> str:
    """Cephes polevl: coeffs[0] * var**n + ... + coeffs[n], as one nested expression."""
    text = repr(float(coeffs[0]))
    for c in coeffs[1:]:
        text = f"({text}) * {var} + {float(c)!r}"
    return text


def chbevl(x: str, coeffs, out: str) -> str:
    """Cephes chbevl (Clenshaw recurrence over Chebyshev coefficients), unrolled; sets `out`."""
    lines = [f"b0 = tl.full({x}.shape, {float(coeffs[0])!r}, {x}.dtype)", f"b1 = tl.full({x}.shape, 0.0, {x}.dtype)", "b2 = b1"]
    for c in coeffs[1:]:
        lines += ["b2 = b1", "b1 = b0", f"b0 = {x} * b1 - b2 + {float(c)!r}"]
    lines.append(f"{out} = 0.5 * (b0 - b2)")
    return "\n    ".join(lines)
