"""PDF rendering primitives shared by the single-run report and the multi-run comparison: the page size,
``Table`` (a table formatted as strings, for the PDF and markdown alike), and pages for figures, tables and text.

Every table is built once as strings and written both into the PDF (matplotlib)
and into markdown (tabulate), so the two always say the same.
"""

from __future__ import annotations

import contextlib
import os
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.backends.backend_pdf import PdfPages

from analysis.units import fmt_bandwidth, fmt_bytes, fmt_ms, fmt_number, fmt_pct

PAGE = (11.69, 8.27)  # A4 landscape, inches
plt.rcParams.update({"pdf.fonttype": 42, "font.size": 9})  # embedded TrueType: text stays extractable

# --- formatting ----------------------------------------------------------------------------

# One set of formatters for the CLI, the PDF and summary.md (analysis.units); short names for tables.
fnum, fpct, fbytes, fms, fbw = fmt_number, fmt_pct, fmt_bytes, fmt_ms, fmt_bandwidth


@dataclass
class Table:
    title: str
    frame: pd.DataFrame  # already formatted strings
    note: str = ""

    def markdown(self) -> str:
        body = self.frame.to_markdown(index=False) if not self.frame.empty else "_(no data)_"
        note = f"\n\n{self.note}" if self.note else ""
        return f"### {self.title}\n\n{body}{note}\n"


def format_columns(df: pd.DataFrame, spec: dict[str, tuple[str, Any]]) -> pd.DataFrame:
    """Select and format columns: {source column: (header, formatter)}."""
    out = pd.DataFrame()
    for col, (header, f) in spec.items():
        out[header] = df[col].map(f) if col in df else "—"
    return out


# --- pages -------------------------------------------------------------------------------------

def save_page(pdf: PdfPages, fig: plt.Figure, rect: tuple[float, float, float, float] = (0, 0, 1, 0.93)) -> None:
    """Lay out under the page title, add to the PDF, free the figure."""
    fig.tight_layout(rect=rect)
    pdf.savefig(fig)
    plt.close(fig)


def titled_page(title: str) -> plt.Figure:
    """A landscape page whose title states the finding."""
    fig = plt.figure(figsize=PAGE)
    fig.suptitle(title, fontsize=13, fontweight="bold", x=0.02, ha="left")
    return fig


def table_page(pdf: PdfPages, table: Table, max_rows: int = 28) -> None:
    df = table.frame
    chunks = [df.iloc[i:i + max_rows] for i in range(0, max(len(df), 1), max_rows)] or [df]
    for i, chunk in enumerate(chunks):
        fig = plt.figure(figsize=PAGE)
        fig.suptitle(table.title + (f" ({i + 1}/{len(chunks)})" if len(chunks) > 1 else ""), fontsize=13,
                     fontweight="bold", x=0.02, ha="left")
        ax = fig.add_axes((0.02, 0.08, 0.96, 0.82))
        ax.axis("off")
        if chunk.empty:
            ax.text(0, 0.9, "(no data)", fontsize=11)
        else:
            cells = [[textwrap.fill(str(v), 60) for v in row] for row in chunk.to_numpy()]
            tab = ax.table(cellText=cells, colLabels=list(chunk.columns), loc="upper left", cellLoc="left")
            tab.auto_set_font_size(False)
            tab.set_fontsize(7 if len(chunk.columns) > 8 else 8)
            tab.auto_set_column_width(list(range(len(chunk.columns))))
            rows_h = max(1, max(c.count("\n") + 1 for row in cells for c in row))
            tab.scale(1, 1.2 * rows_h)
        if table.note:
            fig.text(0.02, 0.03, textwrap.fill(table.note, 170), fontsize=8, style="italic")
        pdf.savefig(fig)
        plt.close(fig)


def text_page(pdf: PdfPages, title: str, blocks: list[tuple[str, list[str]]], banner: str | None = None) -> None:
    fig = plt.figure(figsize=PAGE)
    fig.suptitle(title, fontsize=16, fontweight="bold", x=0.02, ha="left")
    y = 0.88
    if banner:
        fig.text(0.02, y, banner, fontsize=12, color="white", fontweight="bold",
                 bbox={"facecolor": "#b00020", "edgecolor": "none", "pad": 4})
        y -= 0.06
    for heading, lines in blocks:
        fig.text(0.02, y, heading, fontsize=12, fontweight="bold")
        y -= 0.04
        for line in lines:
            wrapped = textwrap.wrap(line, 150) or [""]
            for w in wrapped:
                fig.text(0.03, y, w, fontsize=9.5)
                y -= 0.03
        y -= 0.02
    pdf.savefig(fig)
    plt.close(fig)


@contextlib.contextmanager
def atomic_pdf(path: str | Path) -> Iterator[PdfPages]:
    """A PdfPages that appears at ``path`` only once every page is written: it is written beside it and
    renamed at the end, so an interrupted report leaves the old PDF (or none), never a truncated one."""
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    try:
        with PdfPages(partial) as pdf:
            yield pdf
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
