"""PDF rendering primitives shared by the single-run report and the multi-run comparison: the page size,
``Table`` (a table formatted as strings, for the PDF and markdown alike), ``Pages`` (the PDF being written:
figure pages, and tables that flow down pages beneath one another) and pages for figures, tables and text.

Every table is built once as strings and written both into the PDF (matplotlib)
and into markdown (tabulate), so the two always say the same. In the PDF a table is set in 8 pt type,
numbers right-aligned, wide cells wrapped, a table wider than the page split into column groups that
repeat its first column, and one longer than the page continued on the next: nothing is left out.
"""

from __future__ import annotations

import contextlib
import os
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.table import Table as MplTable

from analysis.table import GROUP_SEP, Table, is_numeric

PAGE = (11.69, 8.27)  # A4 landscape, inches
plt.rcParams.update({"pdf.fonttype": 42, "font.size": 9})  # embedded TrueType: text stays extractable

TABLE_PT = 8.0  # type size of every table cell on the page (the smallest text a reader must read)
TITLE_PT = 12.0  # a table's heading
_W, _H = PAGE[0] * 72, PAGE[1] * 72  # the page in points
_MARGIN = 22.0  # left and right page margin, points
_PAD = 4.0  # cell padding left and right, points
_LINE = TABLE_PT * 1.2  # one line of cell text, points
_ROW_PAD = 2.5  # cell padding above and below, points

# --- measuring type ------------------------------------------------------------------------------

_RENDERER = RendererAgg(10, 10, 72)  # 72 dpi: one pixel is one point


@cache
def _char_width(ch: str, bold: bool) -> float:
    prop = FontProperties(size=TABLE_PT, weight="bold" if bold else "normal")
    return _RENDERER.get_text_width_height_descent(ch, prop, ismath=False)[0]


def text_width(s: str, bold: bool = False) -> float:
    """Width in points of ``s`` (the widest of its lines) in the table's type; a little over, never under."""
    return max((sum(_char_width(c, bold) for c in line) for line in str(s).split("\n")), default=0.0) * 1.04


def _wrap(s: str, width_pt: float, bold: bool = False) -> str:
    """``s`` broken at spaces (or hyphens) into lines no wider than ``width_pt`` where its words allow."""
    out = []
    for para in str(s).split("\n"):
        line = ""
        for word in para.split(" "):
            trial = f"{line} {word}" if line else word
            if line and text_width(trial, bold) > width_pt:
                out.append(line)
                line = word
            else:
                line = trial
        out.append(line)
    return "\n".join(out)


# --- table layout ------------------------------------------------------------------------------------

@dataclass
class _Layout:
    """One column group of a table laid out: columns, their widths (points), wrapped headers and cells."""

    columns: list[int]
    groups: list[str]  # per column, its group heading ('' for none)
    widths: list[float]
    right: list[bool]
    header: list[str]
    header_h: float
    cells: list[list[str]]  # per row, the wrapped cell text of these columns
    heights: list[float]


def _layout(table: Table, max_width: float) -> list[_Layout]:
    df = table.frame
    full = [str(c) for c in df.columns]
    group_of = [h.split(GROUP_SEP, 1)[0] if GROUP_SEP in h else "" for h in full]
    headers = [h.split(GROUP_SEP, 1)[1] if GROUP_SEP in h else h for h in full]
    raw = [[str(v) for v in row] for row in df.to_numpy()]
    if not headers:  # no columns: nothing to set but '(no data)'
        return [_Layout([], [], [], [], [], 0.0, [], [])]
    right = [is_numeric(df.iloc[:, j].astype(str)) for j in range(len(headers))]
    natural = [max([text_width(r[j]) for r in raw] + [0.0]) for j in range(len(headers))]
    # Text columns wrap; a numeric column never does. Narrow the widest text column until the table fits.
    limit = [w if right[j] else min(w, 230.0) for j, w in enumerate(natural)]

    def header_need(j: int, w: float) -> float:  # a header wraps onto at most about three lines
        longest_word = max((text_width(x, True) for x in headers[j].split()), default=0.0)
        return max(w, longest_word, text_width(headers[j], True) / 3,
                   text_width(group_of[j], True) / max(1, group_of.count(group_of[j])) if group_of[j] else 0.0)

    def widths() -> list[float]:
        return [header_need(j, limit[j]) + 2 * _PAD for j in range(len(headers))]

    while sum(widths()) > max_width:
        text_cols = [j for j in range(len(headers)) if not right[j] and limit[j] > 60.0]
        if not text_cols:
            break
        j = max(text_cols, key=lambda k: limit[k])
        limit[j] = max(60.0, limit[j] * 0.85)
    w = widths()
    groups: list[list[int]] = []
    if sum(w) <= max_width or len(headers) < 2:
        groups = [list(range(len(headers)))]
    else:  # still too wide: column groups, each repeating the first column
        current = [0]
        for j in range(1, len(headers)):
            if current != [0] and sum(w[k] for k in current) + w[j] > max_width:
                groups.append(current)
                current = [0]
            current.append(j)
        groups.append(current)
    out = []
    for cols in groups:
        ws = [w[j] for j in cols]
        header = [_wrap(headers[j], ws[i] - 2 * _PAD, True) for i, j in enumerate(cols)]
        cells = [[r[j] if right[j] else _wrap(r[j], ws[i] - 2 * _PAD) for i, j in enumerate(cols)] for r in raw]
        heights = [max(c.count("\n") + 1 for c in row) * _LINE + 2 * _ROW_PAD for row in cells]
        out.append(_Layout(cols, [group_of[j] for j in cols], ws, [right[j] for j in cols], header,
                           max(h.count("\n") + 1 for h in header) * _LINE + 2 * _ROW_PAD
                           + (_LINE + 2 * _ROW_PAD if any(group_of[j] for j in cols) else 0.0), cells, heights))
    return out


def draw_table(fig: plt.Figure, table: Table, lay: _Layout, rows: range, x: float, top: float) -> float:
    """Draw ``rows`` of one column group with its header, the top-left corner at (x, top) in points from the
    page's bottom-left; return the height drawn (points). The table is one axes whose gid names it."""
    group_h = _LINE + 2 * _ROW_PAD if any(lay.groups) else 0.0
    if group_h:  # group headings: one centred over each run of columns of one group, underlined
        left, j = x, 0
        while j < len(lay.groups):
            k = j
            while k + 1 < len(lay.groups) and lay.groups[k + 1] == lay.groups[j]:
                k += 1
            span = sum(lay.widths[j:k + 1])
            if lay.groups[j]:
                fig.text((left + span / 2) / _W, (top - group_h / 2) / _H, lay.groups[j], fontsize=TABLE_PT,
                         fontweight="bold", ha="center", va="center")
                fig.add_artist(Line2D([(left + 3) / _W, (left + span - 3) / _W], [(top - group_h + 1) / _H] * 2,
                                      color="#707070", lw=0.6))
            left += span
            j = k + 1
        top -= group_h
    head_h = lay.header_h - group_h
    height = head_h + sum(lay.heights[i] for i in rows)
    width = sum(lay.widths)
    ax = fig.add_axes((x / _W, (top - height) / _H, width / _W, height / _H))
    ax.set_gid(f"table:{table.title}")
    ax.axis("off")
    tab = MplTable(ax, loc="upper left")
    tab.AXESPAD = 0
    tab.auto_set_font_size(False)

    def cell(r: int, c: int, h: float, text: str, right: bool, bold: bool = False,
             face: str | None = None, color: str | None = None) -> None:
        cw = lay.widths[c]
        ce = tab.add_cell(r, c, width=cw / width, height=h / height, text=text, loc="right" if right else "left",
                          facecolor=face or ("#e8e8e8" if bold else "white"), edgecolor="#b0b0b0")
        ce.PAD = _PAD / cw
        ce.set_linewidth(0.4)
        t = ce.get_text()
        t.set_fontsize(TABLE_PT)
        t.set_linespacing(1.1)
        if bold:
            t.set_fontweight("bold")
        if color:
            t.set_color(color)
            t.set_fontweight("bold")

    for c, text in enumerate(lay.header):
        cell(0, c, head_h, text, lay.right[c], bold=True)
    headers = list(table.frame.columns)
    for r, i in enumerate(rows, start=1):
        for c, j in enumerate(lay.columns):
            colors = table.colors.get(headers[j])
            face = colors[i] if colors is not None and i < len(colors) else None
            text = lay.cells[i][c]
            cell(r, c, lay.heights[i], text, lay.right[c], face=face, color=table.text_colors.get(text.strip()))
    ax.add_table(tab)
    return height + group_h


# --- pages -------------------------------------------------------------------------------------

def save_page(pdf: Any, fig: plt.Figure, rect: tuple[float, float, float, float] = (0, 0, 1, 0.93)) -> None:
    """Lay out under the page title, add to the PDF, free the figure."""
    fig.tight_layout(rect=rect)
    pdf.savefig(fig)
    plt.close(fig)


def titled_page(title: str) -> plt.Figure:
    """A landscape page whose title states the finding."""
    fig = plt.figure(figsize=PAGE)
    fig.suptitle(title, fontsize=13, fontweight="bold", x=0.02, ha="left")
    return fig


class Pages:
    """The PDF being written: figure pages as they come, and tables set one beneath another on a page
    until it is full, so short tables share a page and a long one continues on the next."""

    TOP = _H - 24.0
    BOTTOM = 24.0

    def __init__(self, pdf: PdfPages) -> None:
        self.pdf = pdf
        self._fig: plt.Figure | None = None
        self._y = self.TOP

    def infodict(self) -> dict[str, Any]:
        return self.pdf.infodict()

    def savefig(self, fig: plt.Figure, **kw: Any) -> None:
        """A figure page, after the tables already set."""
        self.flush()
        self.pdf.savefig(fig, **kw)

    def flush(self) -> None:
        if self._fig is not None:
            self.pdf.savefig(self._fig)
            plt.close(self._fig)
            self._fig = None
            self._y = self.TOP

    def _room(self) -> float:
        return self._y - self.BOTTOM

    def _page(self) -> plt.Figure:
        if self._fig is None:
            self._fig = plt.figure(figsize=PAGE)
            self._y = self.TOP
        return self._fig

    def table(self, table: Table, top: float | None = None, fig: plt.Figure | None = None,
              bottom: float | None = None) -> None:
        """Set ``table`` (its title, every row, its note) from the cursor down, continuing on new pages; on
        ``fig`` between ``top`` and ``bottom`` (points) first when given (a table beneath a plot)."""
        layouts = _layout(table, _W - 2 * _MARGIN)
        note = textwrap.fill(table.note, 190) if table.note else ""
        note_h = (note.count("\n") + 1) * _LINE + 6 if note else 0.0
        title_h = TITLE_PT * 1.6
        for g, lay in enumerate(layouts):
            part = f" (columns {g + 1}/{len(layouts)})" if len(layouts) > 1 else ""
            i, n = 0, len(lay.cells)
            first = True
            while True:
                if fig is not None:
                    page, y, floor = fig, top, bottom
                else:
                    page = self._page()
                    y, floor = self._y, self.BOTTOM
                avail = y - floor - title_h - lay.header_h
                fit, used = 0, 0.0
                while i + fit < n and used + lay.heights[i + fit] <= avail:
                    used += lay.heights[i + fit]
                    fit += 1
                last = i + fit >= n
                want_note = note_h if last and g == len(layouts) - 1 else 0.0
                if last and fit and used + want_note > avail:  # keep the note with the last rows
                    fit -= 1
                    last = False
                    used -= lay.heights[i + fit]
                if (fit < min(3, n - i) or (n == 0 and avail < _LINE)) and fig is None and self._y < self.TOP:
                    self.flush()  # not enough room here: a fresh page
                    continue
                fit = max(fit, 1) if n else 0
                heading = table.title + part + ("" if first else " (continued)")
                page.text(_MARGIN / _W, (y - TITLE_PT) / _H, heading, fontsize=TITLE_PT, fontweight="bold",
                          va="baseline")
                y -= title_h
                if n:
                    y -= draw_table(page, table, lay, range(i, i + fit), _MARGIN, y)
                else:
                    page.text(_MARGIN / _W, (y - _LINE) / _H, "(no data)", fontsize=TABLE_PT)
                    y -= _LINE
                i += fit
                if i >= n and g == len(layouts) - 1 and note:
                    page.text(_MARGIN / _W, (y - 4 - TABLE_PT) / _H, note, fontsize=TABLE_PT, style="italic",
                              va="top")
                    y -= note_h
                y -= 14  # space before what follows
                if fig is not None:  # the plot's page is complete: the rest flows on the pages after it
                    self.pdf.savefig(fig)
                    plt.close(fig)
                    fig = None
                else:
                    self._y = y
                first = False
                if i >= n:
                    break


def table_page(pdf: Any, table: Table, max_rows: int | None = None) -> None:
    """``table`` set into the PDF: on the pages of a ``Pages``, beneath the tables before it; into a plain
    PdfPages on pages of its own."""
    if isinstance(pdf, Pages):
        pdf.table(table)
        return
    pages = Pages(pdf)
    pages.table(table)
    pages.flush()


def rows_from(table: Table, start: int) -> Table:
    """The table's rows from ``start`` on (their colours with them), titled as continued."""
    return replace(table, frame=table.frame.iloc[start:].reset_index(drop=True),
                   colors={k: v[start:] for k, v in table.colors.items()})


def set_height(table: Table, rows: int, width: float, title_pt: float = 10.0) -> float:
    """Points ``set_table`` takes for the title, header and first ``rows`` rows of ``table`` set ``width`` wide
    (and its note where every row is set)."""
    lay = _layout(table, width)[0]
    h = title_pt * 1.5 + lay.header_h + sum(lay.heights[:rows])
    if rows == len(lay.heights) and table.note:
        h += (textwrap.fill(table.note, max(40, int(width / 4.4))).count("\n") + 1) * _LINE + 4
    return h


def set_table(fig: plt.Figure, table: Table, x: float, top: float, bottom: float, width: float,
              title_pt: float = 10.0) -> int:
    """As many rows of ``table`` as fit between ``top`` and ``bottom`` (points from the page's bottom), within
    ``width`` points from ``x``, under its title (and its note where every row fits); return the rows set (0
    where not even its header fits, or it is too wide to set without splitting its columns)."""
    lays = _layout(table, width)
    if len(lays) > 1:
        return 0
    lay = lays[0]
    title_h = title_pt * 1.5
    avail = top - bottom - title_h - lay.header_h
    n, used = 0, 0.0
    while n < len(lay.heights) and used + lay.heights[n] <= avail:
        used += lay.heights[n]
        n += 1
    if len(lay.heights) and n == 0:
        return 0
    note = textwrap.fill(table.note, max(40, int(width / 4.4))) if table.note and n == len(lay.heights) else ""
    note_h = (note.count("\n") + 1) * _LINE + 4 if note else 0.0
    if note and used + note_h > avail:
        note = ""
    fig.text(x / _W, (top - title_pt) / _H, table.title, fontsize=title_pt, fontweight="bold", va="baseline")
    y = top - title_h
    if n:
        y -= draw_table(fig, table, lay, range(n), x, y)
    if note:
        fig.text(x / _W, (y - 3) / _H, note, fontsize=TABLE_PT, style="italic", va="top")
    return n


def plot_with_table(pdf: Any, title: str, table: Table | None, draw: Callable[[plt.Figure, tuple], None],
                    max_table_share: float = 0.45) -> None:
    """One page: the finding as its title, a plot, and beneath it the table it explains (as many rows as fit
    in ``max_table_share`` of the page; the rest continue on the next pages). ``draw(fig, rect)`` draws the
    plot into ``rect`` (left, bottom, right, top in figure fractions)."""
    fig = titled_page(title)
    table_top = None
    if table is not None:
        lay = _layout(table, _W - 2 * _MARGIN)[0]
        budget = max_table_share * (_H - 60)
        need, rows = TITLE_PT * 1.6 + lay.header_h + 14, 0
        for h in lay.heights:
            if need + h > budget:
                break
            need += h
            rows += 1
        if rows == len(lay.heights) and table.note:
            need += (textwrap.fill(table.note, 190).count("\n") + 1) * _LINE + 6
        table_top = Pages.BOTTOM + min(need, budget) + 6
    plot_bottom = (table_top + 8) / _H if table_top is not None else 0.03
    draw(fig, (0.0, plot_bottom, 1.0, 0.93))
    pages = pdf if isinstance(pdf, Pages) else Pages(pdf)
    pages.flush()
    if table is not None:
        pages.table(table, top=table_top, fig=fig, bottom=Pages.BOTTOM)  # saves the page, then flows the rest
    else:
        pages.pdf.savefig(fig)
        plt.close(fig)
    if not isinstance(pdf, Pages):
        pages.flush()


def text_page(pdf: Any, title: str, blocks: list[tuple[str, list[str]]], banner: str | None = None) -> None:
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
