"""What the report's pages share: an engine's style, highlighted divergences, the analysis' tables as the report shows
them, formatting of a cell, and plot axes, legends and series.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from analysis.measured import theory_vs_measured as tvm
from analysis.measured.pipeline import (
    Analysis,
)
from analysis.report.pdf import (
    PAGE,
    rows_from,
    set_height,
)
from analysis.report.style import TOLERANCE, EngineStyle, plain, severity_color
from analysis.table import Table, fbytes, fms, fnum, units_in_headers

PAGE_W, _H = PAGE[0] * 72, PAGE[1] * 72  # the page in points


def style_of(a: Analysis) -> EngineStyle:
    return EngineStyle.of(a.res)


def relative_error(pred: Any, meas: Any) -> float | None:
    return tvm.rel(pred, meas)


def highlights(a: Analysis, key: str, frame: pd.DataFrame) -> dict[str, list[str | None]]:
    """Per column, the colour of each cell whose prediction misses its measurement by more than the tolerance."""
    n = len(frame)

    def fit(values: list[Any]) -> list[str | None] | None:
        return values if len(values) == n else None

    out: dict[str, list[str | None] | None] = {}
    cap = a.capacity
    if key == "capacity" and "blocks_error" in cap:
        out["error"] = fit([severity_color(r["blocks_error"] / r["num_blocks_predicted"], 0)
                            if pd.notna(r.get("blocks_error")) and abs(r["blocks_error"]) > r["blocks_tolerance"]
                            and r["num_blocks_predicted"] else None for r in cap.to_dict("records")])
    elif key == "budget" and "kv_budget_rel_error" in cap:
        out["error"] = fit([severity_color(x) for x in cap["kv_budget_rel_error"]])
    elif key == "ceiling" and "ceiling_predicted" in cap:
        out["ran together up to"] = fit([severity_color(relative_error(p, m)) for p, m in
                                         zip(cap["ceiling_predicted"], cap["ceiling_measured_at_least"], strict=True)])
    elif key == "decode" and "fitted_rel_error" in a.decode:
        out["fit error"] = fit([severity_color(x) for x in a.decode["fitted_rel_error"]])
    elif key == "crossover" and "rel_error" in a.crossover:
        out["error"] = fit([severity_color(x) for x in a.crossover["rel_error"]])
    elif key == "kv_dtype":
        eff = tvm.kv_dtype_effect(a.decode)
        if "rel_error" in eff:
            out["error"] = fit([severity_color(x) for x in eff["rel_error"]])
    elif key == "claims" and not a.claims.empty:
        out["verdict"] = fit([severity_color(1.0, 0) if v == "diverges" else None for v in a.claims["verdict"]])
        out["error"] = fit([severity_color(e, t if t is not None and pd.notna(t) else TOLERANCE)
                            if v == "diverges" else None
                            for v, e, t in zip(a.claims["verdict"], a.claims["error"], a.claims["tolerance"],
                                               strict=True)])
    elif key == "divergences" and "rel_error" in a.divergences:
        out["error"] = fit([severity_color(x) for x in a.divergences.head(25)["rel_error"]])
    return {k: v for k, v in out.items() if v is not None and k in frame.columns}


def styled(a: Analysis, table: Table, key: str | None = None) -> Table:
    """A table as the report shows it, in the PDF and summary.md alike: engine labels for engine ids, the
    label in its engine's colour, divergences past the tolerance coloured, a unit every number shares moved
    into its header."""
    st = style_of(a)
    frame = table.frame.map(st.relabel) if not table.frame.empty else table.frame
    colors = {**table.colors, **(highlights(a, key, frame) if key else {})}
    if "engine" in frame.columns and len(frame) > 1:  # rows in the engines' label order (stable within one)
        rank = {lab: i for i, lab in enumerate(sorted(st.labels.values(), key=lambda x: int(x[1:])))}
        order = sorted(range(len(frame)), key=lambda i: rank.get(frame["engine"].iloc[i], len(rank)))
        frame = frame.iloc[order].reset_index(drop=True)
        colors = {k: [v[i] for i in order] if len(v) == len(order) else v for k, v in colors.items()}
    t = replace(table, title=st.relabel(table.title), note=st.relabel(table.note), frame=frame, colors=colors,
                text_colors={**table.text_colors, **{st.label(e): c for e, c in st.colors.items()}})
    return units_in_headers(t)


def analysis_table(a: Analysis, key: str) -> Table | None:
    t = a.tables.get(key)
    return styled(a, t, key) if t is not None else None


SOURCES = (("ideal", "ideal"), ("model", "allocator"), ("vllm", "vLLM"))


def pick(values: list[int], most: int) -> list[int]:
    """At most ``most`` of the sorted ``values``: the first, the last and evenly between."""
    if len(values) <= most:
        return values
    return sorted({values[round(i * (len(values) - 1) / (most - 1))] for i in range(most)})


def ms_text(s: Any) -> str:
    return "—" if s is None or pd.isna(s) else f"{1e3 * float(s):,.2f}"


def pct_text(x: Any) -> str:
    return "—" if x is None or pd.isna(x) else f"{100 * float(x):+.0f}"


def value_text(quantity: str, v: Any) -> str:
    if "decode step" in quantity:
        return fms(v)
    if "bytes" in quantity:
        return fbytes(v)
    return fnum(v)


def engine_order(st: EngineStyle) -> Callable[[str], int]:
    return lambda e: int(st.label(e)[1:]) if st.label(e)[1:].isdigit() else 10**6


def continued_table(t: Table, start: int) -> Table:
    r = rows_from(t, start)
    return replace(r, title=t.title + (" (continued)" if start else ""))


def table_height(t: Table, rows: int, width: float) -> float:
    return set_height(t, rows, width)


LEGEND_W = 0.15  # the right-hand share of a plot's area kept for its legend, outside the data


def plot_axes(fig: plt.Figure, rect: tuple[float, float, float, float], n: int, cols: int | None = None,
          sharey: bool = False) -> list[Any]:
    """``n`` panels in ``rect`` (left, bottom, right, top; figure fractions) less the legend's strip."""
    cols = cols or min(n, 4)
    rows = math.ceil(n / cols)
    left, b, r, t = rect
    gs = fig.add_gridspec(rows, cols, left=left + 0.06, right=r - LEGEND_W, bottom=b + 0.08, top=t - 0.04,
                          wspace=0.28, hspace=0.45)
    axes = []
    for i in range(n):
        ax = fig.add_subplot(gs[i // cols, i % cols], sharey=axes[0] if sharey and axes else None)
        axes.append(ax)
    return axes


def plot_legend(fig: plt.Figure, rect: tuple[float, float, float, float], handles: list[Any]) -> None:
    """The legend in the plot area's right-hand strip, outside every panel."""
    if handles:
        for h in handles:  # long labels on two or three lines, so the legend keeps inside the page
            h.set_label("\n".join(textwrap.fill(part, 19) for part in str(h.get_label()).split("\n")))
        fig.legend(handles=handles, loc="upper right", bbox_to_anchor=(rect[2] - 0.004, rect[3] - 0.04),
                   fontsize=8, frameon=False, handlelength=1.6, borderaxespad=0)


def engine_handles(st: EngineStyle, ids: Any) -> list[Any]:
    """A legend entry per engine; past eight engines one line pointing to the coloured key on page one."""
    ids = sorted(set(ids), key=engine_order(st))
    if len(ids) > 8:
        return [Line2D([], [], ls="none", label="colours: engines,\nkey on page one")]
    return [Line2D([], [], color=st.color(e), lw=2.5, label=st.label(e)) for e in ids]


def spread_bars(e: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Error bars from each point's median to its 25th and 75th percentiles; a record written before kvprof kept
    them draws its interquartile range about the median, never below zero."""
    step = e["decode_step_s"].astype(float)
    half = (e["decode_step_spread_s"].astype(float) / 2).fillna(0) if "decode_step_spread_s" in e else step * 0
    lo = (step - e["decode_step_p25_s"].astype(float)) if "decode_step_p25_s" in e else half
    hi = (e["decode_step_p75_s"].astype(float) - step) if "decode_step_p75_s" in e else half
    lo = lo.fillna(half).clip(lower=0).combine(step, min)
    hi = hi.fillna(half).clip(lower=0)
    return lo, hi


def draw_series(ax: Any, x: Any, y: Any, fmt: str, **kw: Any) -> None:
    """One series joined by a line: its points sorted by x, one point per x (the mean of repeats)."""
    d = pd.DataFrame({"x": np.asarray(x, dtype=float), "y": np.asarray(y, dtype=float)}).dropna()
    if d.empty:
        return
    d = d.groupby("x", as_index=False)["y"].mean().sort_values("x")
    if fmt:
        ax.plot(d["x"], d["y"], fmt, **kw)
    else:
        ax.plot(d["x"], d["y"], **kw)


def wrap_title(title: str) -> str:
    """A finding that fits the page's width: broken onto a second line where it is long."""
    return textwrap.fill(title, 100)


def format_axes(*axes: Any) -> None:
    for ax in axes:
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
        ax.grid(alpha=0.3)


def st_relabel(a: Analysis, text: str) -> str:
    return style_of(a).relabel(text)


def no_markdown(a: Analysis) -> list[str]:
    return []
