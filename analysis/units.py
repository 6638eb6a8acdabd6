"""Byte sizes in, human units out: the one place kvprof parses and formats quantities.

Parsing is pydantic's ``ByteSize`` (``8GiB``, ``512 MiB``, ``16MB``, ``2000000000``:
binary units are powers of 1024, decimal ones powers of 1000). Every table, plot
label and message formats through the functions below, so a quantity reads the same
in the CLI, the PDF and summary.md. Missing values (None, NaN, pd.NA) print as "—".
"""

from __future__ import annotations

import math
import numbers
import re
import sys
from typing import Any

from pydantic import ByteSize, TypeAdapter, ValidationError

_BYTE_SIZE = TypeAdapter(ByteSize)
_BYTES_TEXT = re.compile(r"\s*(\d+(\.\d+)?|\.\d+)\s*[A-Za-z]*\s*")
MISSING = "—"


def parse_bytes(text: str | int) -> int:
    """'8GiB', '512 MiB', '16MB', '4096' → bytes. Raises ValueError naming the input."""
    # pydantic's pattern is anchored only at the start: '1.5.5GiB' would read as 1 byte, '5GiB 3' as 5 GiB.
    if isinstance(text, bool) or (isinstance(text, str) and not _BYTES_TEXT.fullmatch(text)):
        raise ValueError(f"{text!r} is not a byte count (examples: 8GiB, 512MiB, 16MB, 2000000000)")
    try:
        return int(_BYTE_SIZE.validate_python(text))
    except ValidationError:
        raise ValueError(f"{text!r} is not a byte count (examples: 8GiB, 512MiB, 16MB, 2000000000)") from None


def missing(x: Any) -> bool:
    """None, NaN (float or numpy), pandas' NA or NaT. pandas is asked only when already imported: a value of
    its own can only come from code that imported it, and the CLI's plan and validate start faster without it."""
    if x is None:
        return True
    pd = sys.modules.get("pandas")
    if pd is not None:
        if x is pd.NA:
            return True
        try:
            return bool(pd.isna(x))
        except (TypeError, ValueError):
            return False
    try:
        return isinstance(x, numbers.Real) and math.isnan(x)
    except (TypeError, ValueError):
        return False


def fmt_bytes(n: Any) -> str:
    """Binary units up to TiB, two decimals: '1.50 GiB', '512.00 MiB', '100 B'."""
    if missing(n):
        return MISSING
    n = float(n)
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,.0f} B"


def fmt_seconds(s: Any) -> str:
    """A single duration in the unit that suits it: '1.500 s', '4.200 ms', '88.08 µs'."""
    if missing(s):
        return MISSING
    s = float(s)
    if s >= 1:
        return f"{s:,.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:,.3f} ms"
    return f"{s * 1e6:,.2f} µs"


def fmt_ms(s: Any) -> str:
    """Seconds as milliseconds (a table column keeps one unit): '4.200 ms'."""
    return MISSING if missing(s) else f"{1e3 * float(s):,.3f} ms"


def fmt_count(n: Any, digits: int = 0) -> str:
    return MISSING if missing(n) else f"{float(n):,.{digits}f}"


def fmt_number(x: Any, digits: int = 3) -> str:
    """Whole numbers with thousands separators, others to `digits` significant digits; bools as yes/no."""
    if missing(x) or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    if isinstance(x, bool) or (type(x).__module__ == "numpy" and type(x).__name__ in ("bool", "bool_")):
        return "yes" if x else "no"
    if isinstance(x, numbers.Integral):
        return f"{int(x):,}"
    x = float(x)
    if x == int(x) and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:,.{digits}g}" if abs(x) < 1e6 else f"{x:.3e}"


def fmt_pct(x: Any) -> str:
    """A signed fraction as a percentage: 0.031 → '+3.1%'."""
    return MISSING if missing(x) else f"{100 * float(x):+.1f}%"


def fmt_bandwidth(x: Any) -> str:
    """Bytes per second in GB/s (decimal, as spec sheets quote bandwidth)."""
    return MISSING if missing(x) else f"{float(x) / 1e9:,.1f} GB/s"


_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
_DURATION = re.compile(r"^\s*([0-9.]+(?:[eE][+-]?[0-9]+)?)\s*(s|ms|us|µs)?\s*$")


def parse_seconds(text: str) -> float:
    """'0.05', '50ms', '50 ms', '800us', '1.5s' → seconds. Raises ValueError naming the input."""
    shown = repr(text) if len(text) <= 40 else repr(text[:40]) + f"… ({len(text):,} characters)"
    m = _DURATION.match(text)
    try:
        value = float(m.group(1)) * _SECONDS[m.group(2) or "s"] if m else None
    except ValueError:
        value = None
    if value is None:
        raise ValueError(f"{shown} is not a duration: give seconds (0.05) or a number with s, ms or us (50ms)")
    if not value > 0:
        raise ValueError(f"{shown}: a duration must be positive")
    if not math.isfinite(value):
        raise ValueError(f"{shown}: a duration must be finite")
    return value
