"""Human formatting of bytes, seconds and rates (tables say their units)."""

from __future__ import annotations

import re

_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
             "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_bytes(text: str | int) -> int:
    """'8GiB', '512 MiB', '2e9', '4096' → bytes. Raises ValueError naming the input."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([kKmMgGtT]i?)?[bB]?\s*", str(text))
    if not m:
        raise ValueError(f"{text!r} is not a byte count (examples: 8GiB, 512MiB, 2e9)")
    value = float(m.group(1)) * _SUFFIXES[(m.group(2) or "").lower()]
    if value != int(value):
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(value)


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,.0f} B"


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "—"
    if s >= 1:
        return f"{s:,.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:,.3f} ms"
    return f"{s * 1e6:,.2f} µs"


def fmt_count(n: float | None, digits: int = 0) -> str:
    if n is None:
        return "—"
    return f"{n:,.{digits}f}"
