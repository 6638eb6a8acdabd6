"""A table as formatted strings, for the PDF and markdown alike, and the short names of the formatters its cells
go through (analysis.units). No drawing here: the analysis builds its tables with this and the report draws
them (analysis.report.pdf).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from analysis.units import fmt_bandwidth, fmt_bytes, fmt_ms, fmt_number, fmt_pct

# One set of formatters for the CLI, the PDF and summary.md (analysis.units); short names for tables.
fnum, fpct, fbytes, fms, fbw = fmt_number, fmt_pct, fmt_bytes, fmt_ms, fmt_bandwidth


@dataclass
class Table:
    """A table as formatted strings. ``colors``: per column, one cell colour (or None) per row, e.g. a
    divergence past its tolerance; ``text_colors``: a cell whose whole text is a key is drawn in that colour
    (an engine's label in its plot colour). A header 'group · column' is drawn in the PDF as a group heading
    spanning its neighbours of the same group above 'column'."""

    title: str
    frame: pd.DataFrame  # already formatted strings
    note: str = ""
    colors: dict[str, list[str | None]] = field(default_factory=dict)
    text_colors: dict[str, str] = field(default_factory=dict)

    def markdown(self) -> str:
        align = tuple("right" if is_numeric(self.frame[c].astype(str)) else "left" for c in self.frame.columns)
        body = (self.frame.to_markdown(index=False, disable_numparse=True, colalign=align)
                if not self.frame.empty else "_(no data)_")
        note = f"\n\n{self.note}" if self.note else ""
        return f"### {self.title}\n\n{body}{note}\n"


def format_columns(df: pd.DataFrame, spec: dict[str, tuple[str, Any]]) -> pd.DataFrame:
    """Select and format columns: {source column: (header, formatter)}."""
    out = pd.DataFrame()
    for col, (header, f) in spec.items():
        out[header] = df[col].map(f) if col in df else "—"
    return out


GROUP_SEP = " · "  # in a header: group heading, then the column's own

_NUMBER = re.compile(r"^([+\-−]?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?)(?: ?(%|[A-Za-zµ]+(?:/[A-Za-z]+)?))?$")
_MISSING = {"—", "", "nan", "None", "·"}


def _number_unit(cell: Any) -> tuple[str, str] | None:
    m = _NUMBER.match(str(cell).strip())
    return (m.group(1), m.group(2) or "") if m else None


_NUMBER_LIKE = re.compile(r"^[≥≤<>~+\-−]?\s?\d")


def is_numeric(column: pd.Series) -> bool:
    """Every cell a number (with or without a unit, or a bound such as '≥105'), or missing: the column is
    right-aligned."""
    cells = [str(c).strip() for c in column if str(c).strip() not in _MISSING]
    return bool(cells) and all(_NUMBER_LIKE.match(c) and "\n" not in c and len(c) < 28 for c in cells)


def units_in_headers(table: Table) -> Table:
    """The table with a unit that every number of a column carries moved into its header ('overhead (ms)')."""
    frame = table.frame.copy()
    renames = {}
    for col in frame.columns:
        cells = [str(c).strip() for c in frame[col]]
        parsed = [_number_unit(c) for c in cells if c not in _MISSING]
        units = {p[1] for p in parsed if p}
        if not parsed or None in parsed or len(units) != 1 or "" in units:
            continue
        unit = units.pop()
        frame[col] = [c if c in _MISSING else _number_unit(c)[0] for c in cells]
        renames[col] = f"{col} ({unit})"
    if not renames:
        return table
    frame = frame.rename(columns=renames)
    colors = {renames.get(k, k): v for k, v in table.colors.items()}
    return replace(table, frame=frame, colors=colors)
