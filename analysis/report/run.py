"""The single-run report: its pages, registered in order in ``PAGES``, and ``build_report``, which walks them
into report.pdf and summary.md (and writes results.parquet and calibration.json); the analysis is
analysis.measured.pipeline.

Page one answers: sequences that fit per engine and length, decode step and TPOT per batch, the largest
divergences, and one figure. Plot titles state the finding; axes carry units; every engine has one short
label and one colour on every page (analysis.report.style); a table shares its page with the plot it explains.
"""

from __future__ import annotations

import io
import json
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis.measured import theory_vs_measured as tvm
from analysis.measured.pipeline import (
    Analysis,
    analyse,
    calibration,
    capacity_at_lengths,
    ceiling_finding,
    headline,
    overhead_finding,
    results_table,
    setup_lines,
)
from analysis.measured.serve import ServeAnalysis, level_text
from analysis.report.pdf import (
    PAGE,
    Pages,
    atomic_pdf,
    plot_with_table,
    rows_from,
    set_height,
    set_table,
    table_page,
    text_page,
    titled_page,
)
from analysis.report.style import TOLERANCE, EngineStyle, plain, scale_axis, severity_color
from analysis.results.load import load
from analysis.results.schema import atomic_write_bytes
from analysis.table import GROUP_SEP, Table, fbw, fbytes, fms, fnum, units_in_headers

_W, _H = PAGE[0] * 72, PAGE[1] * 72  # the page in points


def _style(a: Analysis) -> EngineStyle:
    return EngineStyle.of(a.res)


# --- tables as the report shows them -------------------------------------------------------------

def _rel(pred: Any, meas: Any) -> float | None:
    return tvm.rel(pred, meas)


def _highlights(a: Analysis, key: str, frame: pd.DataFrame) -> dict[str, list[str | None]]:
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
        out["ran together up to"] = fit([severity_color(_rel(p, m)) for p, m in
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
    st = _style(a)
    frame = table.frame.map(st.relabel) if not table.frame.empty else table.frame
    colors = {**table.colors, **(_highlights(a, key, frame) if key else {})}
    if "engine" in frame.columns and len(frame) > 1:  # rows in the engines' label order (stable within one)
        rank = {lab: i for i, lab in enumerate(sorted(st.labels.values(), key=lambda x: int(x[1:])))}
        order = sorted(range(len(frame)), key=lambda i: rank.get(frame["engine"].iloc[i], len(rank)))
        frame = frame.iloc[order].reset_index(drop=True)
        colors = {k: [v[i] for i in order] if len(v) == len(order) else v for k, v in colors.items()}
    t = replace(table, title=st.relabel(table.title), note=st.relabel(table.note), frame=frame, colors=colors,
                text_colors={**table.text_colors, **{st.label(e): c for e, c in st.colors.items()}})
    return units_in_headers(t)


def _table(a: Analysis, key: str) -> Table | None:
    t = a.tables.get(key)
    return styled(a, t, key) if t is not None else None


# --- page one: the answer -------------------------------------------------------------------------------

_SOURCES = (("ideal", "ideal"), ("model", "allocator"), ("vllm", "vLLM"))


def _pick(values: list[int], most: int) -> list[int]:
    """At most ``most`` of the sorted ``values``: the first, the last and evenly between."""
    if len(values) <= most:
        return values
    return sorted({values[round(i * (len(values) - 1) / (most - 1))] for i in range(most)})


def capacity_answer(a: Analysis) -> tuple[Table, pd.DataFrame] | None:
    """Sequences that fit per engine (rows: ideal, allocator model, vLLM's pool, measured) at up to four swept
    lengths, the saturation length and max_model_len (columns); the long frame it comes from (every length)."""
    cl = capacity_at_lengths(a)
    if cl.empty:
        return None
    st = _style(a)
    swept = _pick(sorted(cl.loc[cl["kind"] == "decode", "length"].unique().tolist()), 4)
    sat_lengths = sorted(cl.loc[cl["kind"] == "saturation", "length"].unique().tolist())
    lengths = sorted(set(swept) | set(sat_lengths))
    heads = {L: f"tokens per sequence{GROUP_SEP}{L:,}" + (" (sat.)" if L in sat_lengths else "") for L in lengths}
    # max_model_len: one column, each engine's own (it is in the engine's id)
    max_head = f"tokens per sequence{GROUP_SEP}max_model_len"
    lengths.append(-1)
    heads[-1] = max_head
    rows, colors = [], {heads[L]: [] for L in lengths}
    sat = cl.dropna(subset=["measured_at_least"])
    measured_head = "measured at saturation"
    if not sat.empty:
        colors[measured_head] = []
    for eid in sorted(cl["engine_id"].unique(), key=_order(st)):
        g = cl[cl["engine_id"] == eid]
        g = pd.concat([g, g[g["kind"] == "max_model_len"].assign(length=-1)]).drop_duplicates("length", keep="last")
        g = g.set_index("length")
        for i, (col, name) in enumerate(_SOURCES[:3]):
            row = {"engine": st.label(eid) if i == 0 else "", "source": name}
            for L in lengths:
                h = heads[L]
                if L not in g.index:
                    row[h], c = "·", None
                else:
                    row[h] = fnum(g.loc[L, col])
                    c = severity_color(_rel(g.loc[L, "model"], g.loc[L, col])) if col == "vllm" else None
                colors[h].append(c)
            if not sat.empty:  # the saturation phase's ceiling, on the vLLM row (it measured vLLM)
                m = sat[sat["engine_id"] == eid]
                text, c = "·", None
                if col == "vllm" and not m.empty:
                    r = m.iloc[0]
                    text = f"≥{fnum(r['measured_at_least'])}" + (
                        f", <{fnum(r['measured_below'])}" if pd.notna(r["measured_below"]) else "")
                    c = severity_color(_rel(r["model"], r["measured_at_least"]))
                row[measured_head] = text
                colors[measured_head].append(c)
            rows.append(row)
    note = ("Sequences of that many tokens (prompt + output) that fit together. Ideal: KV budget ÷ bytes per "
            "sequence; allocator: the allocator model's pool (blocks, null block out); vLLM: vLLM's own pool; "
            "measured: ran together at the saturation length (sat.), preempted or queued from the second number; "
            f"Coloured: over {100 * TOLERANCE:.0f}% from the allocator." + (
                f" All {cl['length'].nunique()} lengths on the capacity plot."
                if len(lengths) < cl["length"].nunique() else ""))
    return Table("Sequences that fit, per engine and sequence length (tokens)", pd.DataFrame(rows), note=note,
                 colors=colors, text_colors={st.label(e): c for e, c in st.colors.items()}), cl


def _reference_points(dec: pd.DataFrame) -> pd.DataFrame:
    """Per engine and batch, the decode point at the engine's longest context measured at every one of its
    batches (the longest at that batch where no context is common to all)."""
    out = []
    for _, g in dec.groupby("engine_id"):
        common = set.intersection(*(set(x["mean_context"]) for _, x in g.groupby("concurrency")))
        for _, b in g.groupby("concurrency"):
            ref = max(common) if common else b["mean_context"].max()
            out.append(b[b["mean_context"] == ref].iloc[0])
    return pd.DataFrame(out)


def tpot_answer(a: Analysis, most: int = 4) -> Table | None:
    """Per engine (rows) and measured batch (column groups, at most ``most``): the decode step by the roofline,
    the fit and the measurement, and the measured TPOT, at one context per engine."""
    dec = a.decode
    if dec.empty or "decode_step_s" not in dec:
        return None
    st = _style(a)
    roof = next((c for c in ("roofline_spec_s", "roofline_probe_s") if c in dec and dec[c].notna().any()), None)
    roof_name = {"roofline_spec_s": "roofline (spec)", "roofline_probe_s": "roofline (probed)"}.get(roof, "roofline")
    ref = _reference_points(dec)
    predicted = "predicted_s" in dec and dec["predicted_s"].notna().any()
    batches = _pick(sorted(int(b) for b in ref["concurrency"].unique()), most)
    rows: list[dict[str, str]] = []
    colors: dict[str, list[str | None]] = {}
    for eid in sorted(ref["engine_id"].unique(), key=_order(st)):
        g = ref[ref["engine_id"] == eid].set_index("concurrency")
        row = {"engine": st.label(eid), "context (tokens)": fnum(round(g["mean_context"].max()))}
        for b in batches:
            r = g.loc[b] if b in g.index else None
            step = r["decode_step_s"] if r is not None else None
            rv = r.get(roof) if r is not None and roof else None
            fv = r.get("fitted_s") if r is not None else None
            pv = r.get("predicted_s") if r is not None and predicted else None
            cells = {f"batch {b}{GROUP_SEP}{roof_name}": (_ms(rv), severity_color(_rel(rv, step)))}
            if predicted:  # the spec-sheet prediction a buyer plans with, beside the measurement (fit: decode page)
                cells[f"batch {b}{GROUP_SEP}predicted"] = (_ms(pv), None)
                cells[f"batch {b}{GROUP_SEP}step"] = (_ms(step), severity_color(_rel(pv, step)))
            else:
                cells[f"batch {b}{GROUP_SEP}fit"] = (_ms(fv), None)
                cells[f"batch {b}{GROUP_SEP}step"] = (_ms(step), severity_color(_rel(fv, step)))
            cells |= {
                     f"batch {b}{GROUP_SEP}TPOT": (_ms(r.get("tpot_s") if r is not None else None), None)}
            for h, (text, color) in cells.items():
                row[h] = text
                colors.setdefault(h, []).append(color)
        rows.append(row)
    note = ("At each engine's longest context measured at all its batches. Step: one decode step of the batch; "
            f"TPOT: per output token of a request. Coloured: roofline over {100 * TOLERANCE:.0f}% off the measured "
            "step; step over that off " + ("the prediction (kvprof plan's spec-sheet latency model; the fit is on "
                                           "the decode page)." if predicted else "the fit.")
            + (" Every batch on the decode page." if len(batches) < ref["concurrency"].nunique() else ""))
    return Table("Decode step and TPOT per batch (ms): roofline, " + ("predicted" if predicted else "fit")
                 + ", measured", pd.DataFrame(rows), note=note,
                 colors=colors, text_colors={st.label(e): c for e, c in st.colors.items()})


def _ms(s: Any) -> str:
    return "—" if s is None or pd.isna(s) else f"{1e3 * float(s):,.2f}"


def _pct(x: Any) -> str:
    return "—" if x is None or pd.isna(x) else f"{100 * float(x):+.0f}"


def _value(quantity: str, v: Any) -> str:
    if "decode step" in quantity:
        return fms(v)
    if "bytes" in quantity:
        return fbytes(v)
    return fnum(v)


PLAN_DIVERGENCE = "decode step, kvprof plan (spec sheet)"


def divergences_answer(a: Analysis, most: int = 6) -> Table | None:
    """The largest divergence of each kind of quantity (not several noisy points of one kind)."""
    d = a.divergences
    if d.empty or "rel_error" not in d:
        return None
    st = _style(a)
    top = d.dropna(subset=["rel_error"])
    top = top[top["rel_error"].abs() > 1e-9].drop_duplicates("quantity")
    # the spec-sheet prediction a buyer plans with comes first: how far the machine was from it
    first = top["quantity"] == PLAN_DIVERGENCE
    top = pd.concat([top[first], top[~first]]).head(most)
    if top.empty:
        return None
    frame = pd.DataFrame([{"quantity": r.quantity, "where": st.relabel(r.where).replace(" c=", ", batch ")
                           .replace(" ctx=", ", ctx "),
                           "predicted": _value(r.quantity, r.predicted), "measured": _value(r.quantity, r.measured),
                           "error (%)": _pct(r.rel_error)} for r in top.itertuples(index=False)])
    return Table("Largest divergence of each quantity", frame,
                 colors={"error (%)": [severity_color(x) for x in top["rel_error"]]},
                 text_colors={st.label(e): c for e, c in st.colors.items()})


def _capacity_figure(fig: plt.Figure, rect: tuple[float, float, float, float], a: Analysis,
                     cl: pd.DataFrame) -> None:
    """Sequences that fit vs sequence length per engine: the allocator model (line), vLLM's pool (circles), the
    saturation phase's measured ceiling (diamond)."""
    st = _style(a)
    legend_w = 118 / _W
    ax = fig.add_axes((rect[0] + 44 / _W, rect[1] + 34 / _H, rect[2] - rect[0] - 44 / _W - legend_w,
                       rect[3] - rect[1] - 56 / _H))
    for eid, g in cl.groupby("engine_id"):
        g = g.sort_values("length")
        c, gid = st.color(eid), st.gid(eid)
        ax.plot(g["length"], g["model"], "-", color=c, lw=1.6, gid=gid, label=st.label(eid))
        ax.plot(g["length"], g["vllm"], "o", color=c, ms=5, mfc="none", gid=gid)
        m = g.dropna(subset=["measured_at_least"])
        ax.plot(m["length"], m["measured_at_least"], "D", color=c, ms=6, gid=gid)
    scale_axis(ax, "x", cl["length"])
    scale_axis(ax, "y", pd.concat([cl["model"], cl["vllm"]]))
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("sequences that fit (count)")
    fig.text(rect[0], rect[3] - 10 / _H, "Sequences that fit vs sequence length", fontsize=10, fontweight="bold")
    ax.grid(alpha=0.3)
    handles = _engine_handles(st, cl["engine_id"])
    handles += [Line2D([], [], color="black", lw=1.6, label="allocator model"),
                Line2D([], [], color="black", marker="o", mfc="none", ls="none", label="vLLM's pool"),
                Line2D([], [], color="black", marker="D", ls="none", label="measured (saturation)")]
    fig.legend(handles=handles, loc="upper left", fontsize=8, frameon=False,
               bbox_to_anchor=(rect[2] - legend_w + 4 / _W, rect[3] - 20 / _H))


def _order(st: EngineStyle) -> Callable[[str], int]:
    return lambda e: int(st.label(e)[1:]) if st.label(e)[1:].isdigit() else 10**6


def _subtitle(a: Analysis) -> str:
    m, e = a.res.manifest, a.res.engines
    first = e.iloc[0] if not e.empty else a.res.servers.iloc[0] if not a.res.servers.empty else None
    pts = a.res.points
    ok = int((pts["status"] == "ok").sum()) if not pts.empty else 0
    get = (lambda k: first.get(k) if first is not None else None)  # noqa: E731
    return (f"Model {get('model') or '—'}  ·  {get('gpu_name') or get('device') or '—'}  ·  vLLM "
            f"{get('vllm_version') or '—'}  ·  {len(e)} engine configuration(s)  ·  {ok} of {len(pts)} points ok"
            f"  ·  sweep {m.get('name')}")


def _answer_page(pdf: Any, a: Analysis) -> None:
    """Page one: the sequences that fit (left), one figure and the largest divergences (right), the decode step
    and TPOT per batch (beneath both). Rows that do not fit continue on the next page."""
    st = _style(a)
    fig = plt.figure(figsize=PAGE)
    fig.suptitle(f"kvprof report — {a.res.manifest.get('name')}", fontsize=16, fontweight="bold", x=0.02, ha="left")
    y = _H - 56
    if banner := _banner(a):
        fig.text(0.02, (y - 12) / _H, banner, fontsize=12, color="white", fontweight="bold",
                 bbox={"facecolor": "#b00020", "edgecolor": "none", "pad": 3})
        y -= 30
    fig.text(22 / _W, (y - 9) / _H, _subtitle(a), fontsize=9)
    y -= 20
    ids = sorted(st.labels, key=_order(st))
    per_line = 4
    for i in range(0, len(ids), per_line):
        for k, eid in enumerate(ids[i:i + per_line]):
            x = 22 + k * 200
            fig.text(x / _W, (y - 8) / _H, st.label(eid), fontsize=9, fontweight="bold", color=st.color(eid))
            fig.text((x + 20) / _W, (y - 8) / _H, eid, fontsize=8)
        y -= 13
    y -= 10
    left_w, right_x = 440.0, 466.0
    bottom = 22.0
    cap, tpot, div = capacity_answer(a), tpot_answer(a), divergences_answer(a)
    rest: list[Table] = []
    left_end = right_end = y
    if cap is not None:
        n = set_table(fig, cap[0], 22, y, bottom + 120, left_w)
        if n < len(cap[0].frame):
            rest.append(_continued(cap[0], n))
        left_end = y - _set_height(cap[0], n, left_w)
        fig_h = 165.0
        _capacity_figure(fig, (right_x / _W, (y - fig_h) / _H, (_W - 14) / _W, y / _H), a, cap[1])
        right_end = y - fig_h - 8
    if div is not None:  # no lower than the left column ends, so the decode table beneath keeps its room
        n = set_table(fig, div, right_x, right_end, max(bottom + 100, left_end), _W - right_x - 22)
        if n < len(div.frame):
            rest.append(_continued(div, n))
        right_end -= _set_height(div, n, _W - right_x - 22)
    if tpot is not None:
        top = min(left_end, right_end) - 10
        n = set_table(fig, tpot, 22, top, bottom, _W - 44) if top - bottom > 70 else 0
        if n < len(tpot.frame):
            rest.insert(0, _continued(tpot, n))
    pdf.savefig(fig)
    plt.close(fig)
    for t in rest:
        table_page(pdf, t)


def _continued(t: Table, start: int) -> Table:
    r = rows_from(t, start)
    return replace(r, title=t.title + (" (continued)" if start else ""))


def _set_height(t: Table, rows: int, width: float) -> float:
    return set_height(t, rows, width)


def _answer_markdown(a: Analysis) -> list[str]:
    st = _style(a)
    parts = [f"# kvprof report — {a.res.manifest.get('name')}\n"]
    if banner := _banner(a):
        parts.append(f"**{banner}**\n")
    parts.append(_subtitle(a) + "\n")
    key = pd.DataFrame([{"label": st.label(e), "engine configuration": e} for e in sorted(st.labels, key=_order(st))])
    if not key.empty:
        parts.append("Engines:\n\n" + key.to_markdown(index=False, disable_numparse=True) + "\n")
    cap = capacity_answer(a)
    for t in (cap[0] if cap else None, tpot_answer(a), divergences_answer(a)):
        if t is not None:
            parts.append(t.markdown())
    return parts

# --- plots ---------------------------------------------------------------------------------------

_LEGEND_W = 0.15  # the right-hand share of a plot's area kept for its legend, outside the data


def _axes(fig: plt.Figure, rect: tuple[float, float, float, float], n: int, cols: int | None = None,
          sharey: bool = False) -> list[Any]:
    """``n`` panels in ``rect`` (left, bottom, right, top; figure fractions) less the legend's strip."""
    cols = cols or min(n, 4)
    rows = math.ceil(n / cols)
    left, b, r, t = rect
    gs = fig.add_gridspec(rows, cols, left=left + 0.06, right=r - _LEGEND_W, bottom=b + 0.08, top=t - 0.04,
                          wspace=0.28, hspace=0.45)
    axes = []
    for i in range(n):
        ax = fig.add_subplot(gs[i // cols, i % cols], sharey=axes[0] if sharey and axes else None)
        axes.append(ax)
    return axes


def _legend(fig: plt.Figure, rect: tuple[float, float, float, float], handles: list[Any]) -> None:
    """The legend in the plot area's right-hand strip, outside every panel."""
    if handles:
        for h in handles:  # long labels on two or three lines, so the legend keeps inside the page
            h.set_label("\n".join(textwrap.fill(part, 19) for part in str(h.get_label()).split("\n")))
        fig.legend(handles=handles, loc="upper right", bbox_to_anchor=(rect[2] - 0.004, rect[3] - 0.04),
                   fontsize=8, frameon=False, handlelength=1.6, borderaxespad=0)


def _engine_handles(st: EngineStyle, ids: Any) -> list[Any]:
    """A legend entry per engine; past eight engines one line pointing to the coloured key on page one."""
    ids = sorted(set(ids), key=_order(st))
    if len(ids) > 8:
        return [Line2D([], [], ls="none", label="colours: engines,\nkey on page one")]
    return [Line2D([], [], color=st.color(e), lw=2.5, label=st.label(e)) for e in ids]


def _spread_bars(e: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Error bars from each point's median to its 25th and 75th percentiles; a record written before kvprof kept
    them draws its interquartile range about the median, never below zero."""
    step = e["decode_step_s"].astype(float)
    half = (e["decode_step_spread_s"].astype(float) / 2).fillna(0) if "decode_step_spread_s" in e else step * 0
    lo = (step - e["decode_step_p25_s"].astype(float)) if "decode_step_p25_s" in e else half
    hi = (e["decode_step_p75_s"].astype(float) - step) if "decode_step_p75_s" in e else half
    lo = lo.fillna(half).clip(lower=0).combine(step, min)
    hi = hi.fillna(half).clip(lower=0)
    return lo, hi


def _series(ax: Any, x: Any, y: Any, fmt: str, **kw: Any) -> None:
    """One series joined by a line: its points sorted by x, one point per x (the mean of repeats)."""
    d = pd.DataFrame({"x": np.asarray(x, dtype=float), "y": np.asarray(y, dtype=float)}).dropna()
    if d.empty:
        return
    d = d.groupby("x", as_index=False)["y"].mean().sort_values("x")
    if fmt:
        ax.plot(d["x"], d["y"], fmt, **kw)
    else:
        ax.plot(d["x"], d["y"], **kw)


def _draw_capacity(fig: plt.Figure, rect: tuple, a: Analysis) -> None:
    st = _style(a)
    cap = a.capacity.copy()
    cap["_o"] = cap["engine_id"].map(_order(st))
    cap = cap.sort_values("_o", ascending=False)
    ax1, ax2 = _axes(fig, rect, 2)
    y = np.arange(len(cap))
    h = 0.38
    for i, r in enumerate(cap.to_dict("records")):
        c, gid = st.color(r["engine_id"]), st.gid(r["engine_id"])
        ax1.barh(i + h / 2, r.get("num_blocks_predicted", np.nan), h, color="white", edgecolor=c, hatch="///", gid=gid)
        ax1.barh(i - h / 2, r["num_blocks_vllm"], h, color=c, gid=gid)
        for k, (col, style) in enumerate((("ideal_max_concurrency", {"color": "white", "edgecolor": c}),
                                          ("max_concurrency_predicted", {"color": "white", "edgecolor": c,
                                                                         "hatch": "///"}),
                                          ("max_concurrency_vllm", {"color": c}))):
            ax2.barh(i + (1 - k) * 0.27, r.get(col, np.nan), 0.26, gid=gid, **style)
    for ax in (ax1, ax2):
        ax.set_yticks(y, [st.label(e) for e in cap["engine_id"]])
        for t, e in zip(ax.get_yticklabels(), cap["engine_id"], strict=True):
            t.set_color(st.color(e))
            t.set_fontweight("bold")
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
        ax.grid(axis="x", alpha=0.3)
    ax1.set_xlabel("KV blocks (count)")
    ax1.set_title("KV blocks per engine", fontsize=10)
    ax2.set_xlabel("sequences of max_model_len that fit (count)")
    ax2.set_title("Sequences that fit at max_model_len", fontsize=10)
    _legend(fig, rect, [Patch(facecolor="white", edgecolor="black", label="ideal arithmetic"),
                        Patch(facecolor="white", edgecolor="black", hatch="///", label="allocator model"),
                        Patch(facecolor="grey", label="vLLM")])


def _capacity_page(pdf: Any, a: Analysis) -> None:
    cap = a.capacity
    t = _table(a, "capacity")
    if cap.empty or "num_blocks_predicted" not in cap:
        if t is not None:
            table_page(pdf, t)
        return
    exact = (cap["blocks_error"].abs() <= cap["blocks_tolerance"]).all()
    title = "Capacity: vLLM's KV blocks " + ("equal the allocator model on every engine" if exact
                                            else "diverge from the allocator model")
    plot_with_table(pdf, title, t, lambda fig, rect: _draw_capacity(fig, rect, a))


def _memory_rows(a: Analysis) -> pd.DataFrame:
    rows = []
    pts = a.res.points
    engines = a.res.engines.set_index("engine_id")
    for r in a.capacity.to_dict("records"):
        eid = r["engine_id"]
        e = engines.loc[eid]
        if pd.notna(r.get("predicted_kv_budget_bytes")):
            rows += [(eid, "theory", "weights", r["weights_bytes_predicted"]),
                     (eid, "theory", "reserve", r["predicted_reserve_bytes"]),
                     (eid, "theory", "KV pool", r["predicted_kv_budget_bytes"])]
        else:
            rows.append((eid, "theory", "KV pool", r["kv_budget_bytes"]))
        rows.append((eid, "vLLM", "KV pool", r["num_blocks_vllm"] * r.get("bytes_per_block", np.nan)))
        for key, label in (("model_loading_bytes", "weights"), ("peak_activation_bytes", "activation peak"),
                           ("non_torch_bytes", "non-torch"), ("cuda_graph_bytes", "CUDA graphs")):
            if pd.notna(e.get(key)):
                rows.append((eid, "vLLM", label, e[key]))
        mine = pts[pts["engine_id"] == eid] if not pts.empty else pts
        for col, label in (("tel_gpu0_peak_mem_used_bytes", "NVML used (peak)"),
                           ("tel_host_peak_rss_bytes", "engine RSS (peak)")):
            if col in mine and mine[col].notna().any():
                rows.append((eid, "measured", label, mine[col].max()))
    return pd.DataFrame(rows, columns=["engine", "source", "part", "bytes"]).dropna()


_PART_COLORS = {"weights": "#8c8c8c", "reserve": "#c7c7c7", "KV pool": "#6a9fd4", "activation peak": "#e6b35a",
                "non-torch": "#b39ddb", "CUDA graphs": "#a1887f", "NVML used (peak)": "#4f4f4f",
                "engine RSS (peak)": "#4f4f4f"}


def _draw_memory(fig: plt.Figure, rect: tuple, a: Analysis, df: pd.DataFrame) -> None:
    """Stacked bars per engine (one panel each): theory vs vLLM vs measured (NVML on GPU, process RSS on CPU)."""
    st = _style(a)
    engines = sorted(df["engine"].unique(), key=_order(st))
    axes = _axes(fig, rect, len(engines), cols=min(len(engines), 6), sharey=True)
    parts = list(dict.fromkeys(df["part"]))
    for ax, eid in zip(axes, engines, strict=True):
        sub = df[df["engine"] == eid]
        for i, src in enumerate(["theory", "vLLM", "measured"]):
            bottom = 0.0
            for part in parts:
                v = sub[(sub["source"] == src) & (sub["part"] == part)]["bytes"].sum()
                if v:
                    ax.bar(i, v / 2**30, bottom=bottom, color=_PART_COLORS.get(part, "#dddddd"), edgecolor="white",
                           lw=0.5)
                    bottom += v / 2**30
        ax.set_xticks(range(3), ["theory", "vLLM", "measured"], fontsize=8)
        ax.set_title(st.label(eid), fontsize=10, fontweight="bold", color=st.color(eid))
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
    axes[0].set_ylabel("memory (GiB)")
    _legend(fig, rect, [Patch(color=_PART_COLORS.get(p, "#dddddd"), label=p) for p in parts])


def _budget_page(pdf: Any, a: Analysis) -> None:
    """The KV budget table beneath the memory plot."""
    t = _table(a, "budget")
    df = _memory_rows(a) if not a.capacity.empty else pd.DataFrame()
    if df.empty:
        if t is not None:
            table_page(pdf, t)
        return
    plot_with_table(pdf, "Memory: where the device memory goes — theory, vLLM's account, and what was measured", t,
                    lambda fig, rect: _draw_memory(fig, rect, a, df))


def _plot_timeline(pdf: Any, a: Analysis, max_points: int = 1500, per_page: int = 8) -> None:
    """Memory over time, one panel per engine in its colour, phases shaded (downsampled for plotting)."""
    tel = a.res.telemetry(columns=["t", "device", "phase", "mem_used_bytes", "rss_bytes"])
    if tel.empty:
        return
    gpu = tel["device"].astype(str).str.startswith("gpu")  # not the host, nor a served engine's /metrics rows
    host = tel["device"] == "host"
    col, label = (("mem_used_bytes", "device memory used (GiB, NVML)") if tel.loc[gpu, "mem_used_bytes"].notna().any()
                  else ("rss_bytes", "engine process-tree RSS (GiB)"))
    tel = tel[gpu] if col == "mem_used_bytes" else tel[host]
    tel = tel.dropna(subset=[col, "t"])
    if tel.empty:
        return
    st = _style(a)
    engines = sorted(tel["engine_id"].dropna().unique(), key=_order(st))
    for start in range(0, len(engines), per_page):
        chunk = engines[start:start + per_page]
        more = f" ({start // per_page + 1}/{math.ceil(len(engines) / per_page)})" if len(engines) > per_page else ""
        fig = titled_page(f"Memory timeline: {label.split(' (')[0]} per engine, by phase{more}")
        rect = (0.0, 0.03, 1.0, 0.93)
        axes = _axes(fig, rect, len(chunk), cols=min(len(chunk), 4), sharey=True)
        for ax, eid in zip(axes, chunk, strict=True):
            g = tel[tel["engine_id"] == eid].sort_values("t")
            t0 = g["t"].min()
            g = g.iloc[:: max(1, len(g) // max_points)]
            t = (g["t"] - t0).to_numpy()
            ph = g["phase"].astype(str).to_numpy()
            cuts = [0, *(np.nonzero(ph[1:] != ph[:-1])[0] + 1), len(ph)]
            span = float(t[-1] - t[0]) if len(t) > 1 else 1.0
            for k in range(len(cuts) - 1):  # a thin line where a phase begins; its name where there is room
                t_from, t_to = t[cuts[k]], t[min(cuts[k + 1], len(t) - 1)]
                if k:
                    ax.axvline(t_from, color="#b0b0b0", lw=0.8)
                if t_to - t_from > 0.12 * span:
                    ax.text((t_from + t_to) / 2, 0.99, ph[cuts[k]], transform=ax.get_xaxis_transform(), fontsize=8,
                            va="top", ha="center", color="#555555")
            ax.plot(t, g[col] / 2**30, "-", color=st.color(eid), lw=1.2, gid=st.gid(eid))
            ax.set_title(st.label(eid), fontsize=10, fontweight="bold", color=st.color(eid))
            ax.set_xlabel("time since launch (s)")
            ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
            ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
        axes[0].set_ylabel(label)
        _legend(fig, rect, [*_engine_handles(st, chunk),
                            Line2D([], [], color="#b0b0b0", lw=0.8, label="a phase begins\n(named where wide)")])
        pdf.savefig(fig)
        plt.close(fig)


def _draw_saturation(fig: plt.Figure, rect: tuple, a: Analysis) -> None:
    st = _style(a)
    sat = a.saturation
    cap = a.capacity.set_index("engine_id") if "ceiling_predicted" in a.capacity else None
    ax1, ax2 = _axes(fig, rect, 2)
    for eid, g in sat.groupby("engine_id"):
        c, gid = st.color(eid), st.gid(eid)
        _series(ax1, g["concurrency"], g["peak_running"], "-o", color=c, ms=4, gid=gid)
        _series(ax2, g["concurrency"], g["preemptions"], "-o", color=c, ms=4, gid=gid)
        if cap is not None and eid in cap.index and pd.notna(cap.loc[eid, "ceiling_predicted"]):
            ax1.axhline(cap.loc[eid, "ceiling_predicted"], color=c, ls="--", lw=1, gid=gid)
    lim = float(sat["concurrency"].max())
    ax1.plot([0, lim], [0, lim], ":", color="grey")
    ax1.set_xlabel("requests submitted together (count)")
    ax1.set_ylabel("peak requests running (count)")
    ax1.set_title("Running requests stop at the ceiling", fontsize=10)
    ax2.set_xlabel("requests submitted together (count)")
    ax2.set_ylabel("preemptions (count)")
    ax2.set_title("Preemptions past the ceiling", fontsize=10)
    for ax in (ax1, ax2):
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
        ax.grid(alpha=0.3)
    _legend(fig, rect, [*_engine_handles(st, sat["engine_id"]),
                        Line2D([], [], color="black", ls="--", label="predicted ceiling"),
                        Line2D([], [], color="grey", ls=":", label="all requests running")])


def _saturation_title(a: Analysis) -> str:
    sat = a.saturation
    bad = sat[(sat["concurrency"] <= sat["predicted_ceiling"]) & ~sat["ran_together"].astype(bool)]
    if not bad.empty:
        return f"Concurrency ceiling: {len(bad)} points preempted or queued at or below the predicted ceiling"
    return "Concurrency ceiling: requests preempt or queue only above the predicted ceiling"


def _ceiling_page(pdf: Any, a: Analysis) -> None:
    """The ceiling and block-rounding tables beneath the saturation plot (running requests and preemptions)."""
    t = _table(a, "ceiling")
    rnd = _table(a, "rounding")
    if a.saturation.empty:
        for x in (t, rnd):
            if x is not None:
                table_page(pdf, x)
        return
    plot_with_table(pdf, _saturation_title(a), t, lambda fig, rect: _draw_saturation(fig, rect, a))
    if rnd is not None:
        table_page(pdf, rnd)


def _plot_throughput(pdf: Any, a: Analysis) -> None:
    sat = a.saturation
    if sat.empty:
        return
    st = _style(a)
    verdict = a.claims.set_index("claim")["verdict"].get("Throughput stops rising once the KV pool is full", "")
    trend = "stays flat" if verdict == "holds" else "still changes"
    fig = titled_page(f"Throughput vs submitted requests: past the full KV pool it {trend}")
    rect = (0.0, 0.03, 1.0, 0.93)
    (ax,) = _axes(fig, rect, 1)
    cap = a.capacity.set_index("engine_id") if "ceiling_predicted" in a.capacity else None
    for eid, g in sat.groupby("engine_id"):
        _series(ax, g["concurrency"], g["output_tokens_per_s"], "-o", color=st.color(eid), ms=4, gid=st.gid(eid))
        if cap is not None and eid in cap.index and pd.notna(cap.loc[eid, "ceiling_predicted"]):
            ax.axvline(cap.loc[eid, "ceiling_predicted"], color=st.color(eid), ls="--", lw=1, gid=st.gid(eid))
    ax.set_xlabel("requests submitted together (count)")
    ax.set_ylabel("output tokens/s (engine step time only)")
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
    ax.grid(alpha=0.3)
    _legend(fig, rect, [*_engine_handles(st, sat["engine_id"]),
                        Line2D([], [], color="black", ls="--", label="predicted ceiling")])
    pdf.savefig(fig)
    plt.close(fig)


def _draw_by_batch(fig: plt.Figure, rect: tuple, a: Analysis, metric: str) -> None:
    """One panel per batch; per engine in its colour: measured points, and (decode) the fit and the roofline as
    lines over context. ``metric``: 'step' (ms) or 'bandwidth' (GB/s)."""
    st = _style(a)
    dec = a.decode
    batches = sorted(dec["concurrency"].unique())
    axes = _axes(fig, rect, len(batches), cols=min(len(batches), 4 if len(batches) <= 8 else 6),
                 sharey=metric == "bandwidth")  # bandwidths compare across batches; step times differ by far
    styles = {"fitted_s": ("-", "fit"), "predicted_s": ((0, (3, 1, 1, 1)), "predicted\n(kvprof plan)"),
              "roofline_spec_s": ("--", "roofline (spec)"), "roofline_probe_s": (":", "roofline (probe)")}
    used: dict[str, str] = {}
    for ax, b in zip(axes, batches, strict=True):
        g = dec[dec["concurrency"] == b]
        ys = []
        for eid, e in g.groupby("engine_id"):
            e = e.sort_values("mean_context")
            c, gid = st.color(eid), st.gid(eid)
            if metric == "step":
                y = 1e3 * e["decode_step_s"]
                lo, hi = _spread_bars(e)
                flagged = e["flagged"].notna() if "flagged" in e else pd.Series(False, index=e.index)
                for mask, face in ((~flagged, c), (flagged, "none")):
                    if mask.any():
                        ax.errorbar(e["mean_context"][mask], y[mask], yerr=[1e3 * lo[mask], 1e3 * hi[mask]],
                                    fmt="o", color=c, mfc=face, ms=4, capsize=0, gid=gid)
                if flagged.any():
                    used["flagged"] = "o"
                ys += list(y)
                for col, (ls, _name) in styles.items():
                    if col in e and e[col].notna().any():
                        _series(ax, e["mean_context"], 1e3 * e[col], "", ls=ls, color=c, lw=1.2, alpha=0.8, gid=gid)
                        used[col] = ls
                        ys += list(1e3 * e[col].dropna())
                t_star = e["crossover_context"].iloc[0] if "crossover_context" in e else None
                if t_star and pd.notna(t_star) and t_star <= dec["mean_context"].max() * 1.05:
                    ax.axvline(t_star, color=c, ls="-.", lw=1, alpha=0.7, gid=gid)
                    used["t*"] = "-."
            else:
                _series(ax, e["mean_context"], e["model_implied_Bps"] / 1e9, "-o", color=c, ms=4, gid=gid)
                ys += list(e["model_implied_Bps"] / 1e9)
                if "gpm_implied_Bps" in e and e["gpm_implied_Bps"].notna().any():
                    _series(ax, e["mean_context"], e["gpm_implied_Bps"] / 1e9, "--s", color=c, ms=3, gid=gid)
                    used["gpm"] = "--"
        ax.set_title(f"batch {b}", fontsize=10)
        ax.set_xlabel("mean context during decode (tokens)")
        scale_axis(ax, "x", [], nbins=4 if len(batches) > 2 else 6)  # linear: step time is linear in context
        scale_axis(ax, "y", [])
        ax.grid(alpha=0.3)
    ylabel = "decode step time (ms)" if metric == "step" else "bandwidth (GB/s, model bytes ÷ measured step)"
    for ax in axes[:: min(len(batches), 4 if len(batches) <= 8 else 6)]:
        ax.set_ylabel(ylabel)
    handles = _engine_handles(st, dec["engine_id"])
    if metric == "step":
        handles.append(Line2D([], [], color="black", marker="o", ls="none", label="measured\n(25th–75th pct)"))
        if "flagged" in used:
            handles.append(Line2D([], [], color="black", marker="o", mfc="none", ls="none",
                                  label="noisy or contended:\nnot fitted"))
        handles += [Line2D([], [], color="black", ls=ls, label=styles[col][1]) for col, ls in used.items()
                    if col in styles]
        if "t*" in used:
            handles.append(Line2D([], [], color="black", ls="-.", label="crossover t*"))
    else:
        handles.append(Line2D([], [], color="black", marker="o", label="model bytes\n÷ measured step"))
        if "gpm" in used:
            handles.append(Line2D([], [], color="black", marker="s", ls="--", label="NVML GPM\nDRAM % × spec"))
        ce = a.ceilings
        for val, name, ls in ((ce.spec_bandwidth_Bps, "spec peak", (0, (6, 2))), (ce.probe_bandwidth_Bps,
                                                                               "probed copy", (0, (1, 1)))):
            if val:
                for ax in axes:
                    ax.axhline(val / 1e9, color="black", ls=ls, lw=1)
                handles.append(Line2D([], [], color="black", ls=ls, label=f"{name}\n{fbw(val)}"))
    _legend(fig, rect, handles)


def _decode_title(a: Analysis) -> str:
    f = a.fit
    if f is None:
        return "Decode step time vs context per batch, with roofline and fit"
    flops = f" + FLOPs / {f.effective_flops / 1e9:,.0f} GFLOP/s" if f.effective_flops else ""
    return (f"Decode{f', {f.regime.kind}-dominated' if f.regime else ''}: step time = "
            f"{fms(f.step_overhead_s)} + bytes / {fbw(f.effective_bandwidth_Bps)}{flops} (R² {f.r2:.2f})")


def _decode_page(pdf: Any, a: Analysis) -> None:
    """Step time vs context, one panel per batch, with the fit table beneath; then the crossover and every
    decode point."""
    fit = _table(a, "fit")
    if fit is not None and a.fit is not None and a.fit.regime:
        fit = replace(fit, note=a.fit.regime.sentence)
    if a.decode.empty:
        if fit is not None:
            table_page(pdf, fit)
        return
    plot_with_table(pdf, _decode_title(a), fit, lambda fig, rect: _draw_by_batch(fig, rect, a, "step"),
                    max_table_share=0.3)


def _fit_markdown(a: Analysis) -> list[str]:
    """The fit in summary.md: the regime sentence first, then the fitted numbers."""
    t = _table(a, "fit")
    if t is None:
        return []
    regime = a.fit.regime.sentence if a.fit is not None and a.fit.regime else ""
    body = replace(t, note="").markdown().split("\n\n", 1)[1].rstrip("\n")  # Table.markdown's table alone
    return [f"### {t.title}\n\n" + (f"{regime}\n\n" if regime else "") + f"{body}\n"]


def _plot_bandwidth(pdf: Any, a: Analysis) -> None:
    dec = a.decode
    if dec.empty or "model_implied_Bps" not in dec:
        return
    ce = a.ceilings
    peak = ce.probe_bandwidth_Bps or ce.spec_bandwidth_Bps
    med = dec["model_implied_Bps"].median()
    title = f"Bandwidth: decode steps move {fbw(med)} by the model's byte count (median)"
    if peak:
        title += f", {100 * med / peak:.0f}% of the {'probed' if ce.probe_bandwidth_Bps else 'spec'} peak"
    fig = titled_page(title)
    _draw_by_batch(fig, (0.0, 0.03, 1.0, 0.93), a, "bandwidth")
    pdf.savefig(fig)
    plt.close(fig)


def _draw_settings(fig: plt.Figure, rect: tuple, a: Analysis) -> None:
    st = _style(a)
    dec = a.decode
    ax1, ax2 = _axes(fig, rect, 2)
    med = dec.groupby(["engine_id", "concurrency"])["decode_step_s"].median().reset_index()
    batches = sorted(med["concurrency"].unique())
    engines = sorted(med["engine_id"].unique(), key=_order(st))
    w = 0.8 / max(1, len(engines))
    for k, eid in enumerate(engines):
        g = med[med["engine_id"] == eid].set_index("concurrency").reindex(batches)
        ax1.bar(np.arange(len(batches)) - 0.4 + (k + 0.5) * w, 1e3 * g["decode_step_s"], w, color=st.color(eid),
                gid=st.gid(eid))
    ax1.set_xticks(range(len(batches)), [str(b) for b in batches])
    ax1.set_xlabel("batch (sequences)")
    ax1.set_ylabel("median decode step over contexts (ms)")
    cap = a.capacity
    if not cap.empty:
        c = cap.assign(_o=cap["engine_id"].map(_order(st))).sort_values("_o")
        ax2.bar(range(len(c)), c["max_concurrency_vllm"], color=[st.color(e) for e in c["engine_id"]])
        for bar, e in zip(ax2.patches, c["engine_id"], strict=True):
            bar.set_gid(st.gid(e))
        ax2.set_xticks(range(len(c)), [f"{st.label(e)}\n{r.kv_cache_dtype} / {r.block_size}"
                                       for e, r in zip(c["engine_id"], c.itertuples(), strict=True)], fontsize=8)
        ax2.set_xlabel("engine (KV dtype / block size)")
        ax2.set_ylabel("sequences of max_model_len that fit (count, vLLM)")
    for ax in (ax1, ax2):
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
        ax.grid(axis="y", alpha=0.3)
    _legend(fig, rect, [Line2D([], [], color=st.color(e), lw=6,
                               label=f"{st.label(e)} {_settings_of(a, e)}") for e in engines])


def _settings_of(a: Analysis, eid: str) -> str:
    e = a.res.engines.set_index("engine_id")
    if eid not in e.index:
        return ""
    r = e.loc[eid]
    return f"{r['kv_cache_dtype']}, block {r['block_size']}\nlen {fnum(r['max_model_len'])}"


def _settings_page(pdf: Any, a: Analysis) -> None:
    """Decode step and capacity per engine setting, with the fp8-vs-16-bit table beneath."""
    t = _table(a, "kv_dtype")
    if a.decode.empty:
        if t is not None:
            table_page(pdf, t)
        return
    plot_with_table(pdf, "Block size and KV dtype: effect on decode step time and capacity", t,
                    lambda fig, rect: _draw_settings(fig, rect, a), max_table_share=0.4)

# --- serve mode (pages drawn only when the run has serve points) -----------------------------------------

def _wrap(title: str) -> str:
    """A finding that fits the page's width: broken onto a second line where it is long."""
    return textwrap.fill(title, 100)


def _fmt_axes(*axes: Any) -> None:
    for ax in axes:
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
        ax.grid(alpha=0.3)


def _draw_served_vs_offline(fig: plt.Figure, rect: tuple, a: Analysis) -> None:
    """Served TPOT and ITL against the offline decode step at the same batch and context, with the fitted line."""
    st = _style(a)
    m, f = a.serve.matched, a.serve.fit
    (ax,) = _axes(fig, rect, 1)
    for eid, g in m.groupby("engine_id"):
        x = 1e3 * g["offline_step_s"]
        ax.plot(x, 1e3 * g["served_tpot_s"], "o", color=st.color(eid), gid=st.gid(eid))
        if g["served_itl_s"].notna().any():
            ax.plot(x, 1e3 * g["served_itl_s"], "s", color=st.color(eid), mfc="none", gid=st.gid(eid))
        for xi, yi, c in zip(x, 1e3 * g["served_tpot_s"], g["concurrency"], strict=True):
            ax.annotate(f"c{c}", (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=8)
    x = 1e3 * m["offline_step_s"]
    ys = 1e3 * m[["served_tpot_s", "served_itl_s"]]
    lo = 0.9 * float(min(x.min(), ys.min().min()))
    hi = 1.1 * float(max(x.max(), ys.max().max()))
    ax.plot([lo, hi], [lo, hi], ":", color="grey")
    handles = [*_engine_handles(st, m["engine_id"]),
               Line2D([], [], color="black", marker="o", ls="none", label="served TPOT (median)"),
               Line2D([], [], color="black", marker="s", mfc="none", ls="none", label="served ITL (median)"),
               Line2D([], [], color="grey", ls=":", label="served = offline")]
    if f is not None and f.slope is not None:
        ax.plot([lo, hi], [f.slope * lo + 1e3 * f.intercept_s, f.slope * hi + 1e3 * f.intercept_s], "-",
                color="black")
        handles.append(Line2D([], [], color="black", label=f"fit: {f.slope:.3f} × offline\n"
                              f"{'−' if f.intercept_s < 0 else '+'} {abs(1e3 * f.intercept_s):.3f} ms "
                              f"(R² {f.r2:.3f})"))
    ax.set_xlabel("offline decode step, same batch and lengths (ms)")
    ax.set_ylabel("served time per output token (ms)")
    _fmt_axes(ax)
    _legend(fig, rect, handles)


def _served_vs_offline_page(pdf: Any, a: Analysis) -> None:
    s = a.serve
    if s is None:
        return
    t = _table(a, "serve_offline")
    if s.matched.empty:
        if t is not None:
            table_page(pdf, t)
        return
    plot_with_table(pdf, _wrap(st_relabel(a, overhead_finding(s) or "Served vs offline")), t,
                    lambda fig, rect: _draw_served_vs_offline(fig, rect, a), max_table_share=0.35)


def st_relabel(a: Analysis, text: str) -> str:
    return _style(a).relabel(text)


def _served_vs_offline_markdown(a: Analysis) -> list[str]:
    s = a.serve
    if s is None:
        return []
    head = [f"## Served vs offline\n\n{overhead_finding(s) or 'No serve point matches an offline decode point.'}."
            + (f" {s.fit.sentence}." if s.fit else "") + f"\n\n{s.tokenizer_sentence}\n"]
    t = _table(a, "serve_offline")
    return [st_relabel(a, x) for x in head] + ([t.markdown()] if t is not None else [])


def _load_finding(s: ServeAnalysis) -> str:
    """What the latency-vs-load curves show, in words: TPOT p50 and TTFT p99 from the lowest to the highest load."""
    for df, x in ((s.closed, "concurrency"), (s.open, "request_rate")):
        d = df.dropna(subset=["tpot_p50_s"]) if not df.empty else df
        if len(d) < 2:
            continue
        lo, hi = d.loc[d[x].idxmin()], d.loc[d[x].idxmax()]
        return (f"Serve latency vs load: TPOT p50 {fms(lo['tpot_p50_s'])} at {level_text(lo)} → "
                f"{fms(hi['tpot_p50_s'])} at {level_text(hi)}; TTFT p99 {fms(lo['ttft_p99_s'])} → "
                f"{fms(hi['ttft_p99_s'])}")
    return "Serve latency vs load: TTFT and TPOT percentiles per level"


_WORKLOAD_MARKERS = "osD^vP*X"


def _draw_serve_load(fig: plt.Figure, rect: tuple, a: Analysis,
                     panels: list[tuple[pd.DataFrame, str, str]]) -> None:
    """TTFT and TPOT p50 (solid) and p99 (dotted) vs load; colour: engine, marker: workload."""
    st = _style(a)
    axes = _axes(fig, rect, 2 * len(panels), cols=2)
    workloads: dict[tuple, str] = {}
    for k, (df, x, label) in enumerate(panels):
        for ax, metric, name in ((axes[2 * k], "ttft", "TTFT"), (axes[2 * k + 1], "tpot", "TPOT")):
            for (eid, p, o, pre), g in df.groupby(["engine_id", "prompt_len", "output_len", "prefix_len"], sort=True):
                mk = workloads.setdefault((p, o, pre), _WORKLOAD_MARKERS[len(workloads) % len(_WORKLOAD_MARKERS)])
                for q, ls in (("p50", "-"), ("p99", ":")):
                    _series(ax, g[x], 1e3 * g[f"{metric}_{q}_s"], ls, marker=mk, ms=4, color=st.color(eid),
                            gid=st.gid(eid))
            ax.set_xlabel(label)
            ax.set_ylabel(f"{name} (ms)")
            ax.set_title(f"{name} p50 (solid) and p99 (dotted)", fontsize=9)
            _fmt_axes(ax)
    eids = pd.concat([df["engine_id"] for df, _, _ in panels])
    _legend(fig, rect, [*_engine_handles(st, eids),
                        *[Line2D([], [], color="black", marker=mk, ls="none",
                                 label=f"p{p}/o{o}" + (f"/prefix {pre}" if pre else ""))
                          for (p, o, pre), mk in workloads.items()],
                        Line2D([], [], color="black", ls="-", label="p50"),
                        Line2D([], [], color="black", ls=":", label="p99 (p90 in the table)")])


def _serve_load_page(pdf: Any, a: Analysis) -> None:
    """TTFT and TPOT percentiles vs concurrency (closed loop) and vs request rate (open loop), table beneath."""
    s = a.serve
    if s is None:
        return
    t = _table(a, "serve_load")
    panels = [(df, x, label) for df, x, label in ((s.closed, "concurrency", "requests in flight (closed loop)"),
                                                  (s.open, "request_rate", "request rate (req/s, open loop)"))
              if not df.empty]
    if not panels:
        if t is not None:
            table_page(pdf, t)
        return
    plot_with_table(pdf, _wrap(_load_finding(s)), t, lambda fig, rect: _draw_serve_load(fig, rect, a, panels),
                    max_table_share=0.4)


def _serve_load_markdown(a: Analysis) -> list[str]:
    if a.serve is None:
        return []
    t = _table(a, "serve_load")
    return [f"## Serve latency vs load\n\n{_load_finding(a.serve)}.\n"] + ([t.markdown()] if t is not None else [])


def _frontier_finding(s: ServeAnalysis) -> str:
    f = s.frontier.dropna(subset=["latency_s", "output_tokens_per_s"]) if not s.frontier.empty else s.frontier
    if f.empty:
        return "Throughput–latency frontier: no point with both throughput and latency"
    best = f.loc[f["output_tokens_per_s"].idxmax()]
    return (f"Throughput–latency frontier: {int(f['pareto'].sum())} of {len(f)} points Pareto-efficient; most "
            f"{best['output_tokens_per_s']:,.0f} tokens/s at {level_text(best)} (TPOT p50 {fms(best['latency_s'])})")


def _draw_frontier(fig: plt.Figure, rect: tuple, a: Analysis, f: pd.DataFrame) -> None:
    st = _style(a)
    (ax,) = _axes(fig, rect, 1)
    other = f[~f["pareto"].astype(bool)]
    best = f[f["pareto"].astype(bool)]
    ax.plot(1e3 * other["latency_s"], other["output_tokens_per_s"], "o", color="#b0b0b0", ls="none")
    workloads: dict[tuple, str] = {}
    for (eid, p, o, pre), g in best.groupby(["engine_id", "prompt_len", "output_len", "prefix_len"]):
        mk = workloads.setdefault((p, o, pre), _WORKLOAD_MARKERS[len(workloads) % len(_WORKLOAD_MARKERS)])
        _series(ax, 1e3 * g["latency_s"], g["output_tokens_per_s"], "-", marker=mk, color=st.color(eid),
                gid=st.gid(eid))
    for r in f.to_dict("records"):
        ax.annotate(level_text(r), (1e3 * r["latency_s"], r["output_tokens_per_s"]), textcoords="offset points",
                    xytext=(4, 4), fontsize=8)
    ax.set_xlabel("TPOT p50 (ms)")
    ax.set_ylabel("output tokens/s (served)")
    _fmt_axes(ax)
    _legend(fig, rect, [*_engine_handles(st, f["engine_id"]),
                        *[Line2D([], [], color="black", marker=mk, label=f"Pareto-efficient, p{p}/o{o}"
                                 + (f"/prefix {pre}" if pre else "")) for (p, o, pre), mk in workloads.items()],
                        Line2D([], [], color="#b0b0b0", marker="o", ls="none", label="dominated")])


def _frontier_page(pdf: Any, a: Analysis) -> None:
    s = a.serve
    if s is None:
        return
    t = _table(a, "serve_frontier")
    f = s.frontier.dropna(subset=["latency_s", "output_tokens_per_s"]) if not s.frontier.empty else s.frontier
    if f.empty:
        if t is not None:
            table_page(pdf, t)
        return
    plot_with_table(pdf, _wrap(_frontier_finding(s)), t, lambda fig, rect: _draw_frontier(fig, rect, a, f),
                    max_table_share=0.4)


def _frontier_markdown(a: Analysis) -> list[str]:
    if a.serve is None:
        return []
    t = _table(a, "serve_frontier")
    return [f"## Serve frontier\n\n{_frontier_finding(a.serve)}.\n"] + ([t.markdown()] if t is not None else [])


def _draw_serve_capacity(fig: plt.Figure, rect: tuple, a: Analysis, d: pd.DataFrame) -> None:
    st = _style(a)
    s = a.serve
    (ax,) = _axes(fig, rect, 1)
    workloads: dict[tuple, str] = {}
    for (eid, p, o), g in d.groupby(["engine_id", "prompt_len", "output_len"]):
        mk = workloads.setdefault((p, o), _WORKLOAD_MARKERS[len(workloads) % len(_WORKLOAD_MARKERS)])
        _series(ax, g["concurrency"], g["tel_server_peak_requests_running"], "-", marker=mk, color=st.color(eid),
                gid=st.gid(eid))
        if "tel_server_peak_requests_waiting" in g:
            _series(ax, g["concurrency"], g["tel_server_peak_requests_waiting"], "--", marker=mk, mfc="none",
                    color=st.color(eid), gid=st.gid(eid))
    lim = float(d["concurrency"].max())
    ax.plot([0, lim], [0, lim], ":", color="grey")
    handles = [*_engine_handles(st, d["engine_id"]),
               *[Line2D([], [], color="black", marker=mk, ls="none", label=f"p{p}/o{o}")
                 for (p, o), mk in workloads.items()],
               Line2D([], [], color="black", ls="-", label="peak running"),
               Line2D([], [], color="black", ls="--", label="peak waiting"),
               Line2D([], [], color="grey", ls=":", label="every request running")]
    for r in s.ceiling.to_dict("records"):
        pred = r.get("predicted_ceiling")
        if pred is None or pd.isna(pred):
            continue
        label = f"predicted ceiling {pred:,.0f}\nat {r['prompt_len'] + r['output_len']} tokens"
        if pred <= 2 * lim:
            ax.axhline(pred, color=st.color(r["engine_id"]), ls="-.", gid=st.gid(r["engine_id"]))
            handles.append(Line2D([], [], color="black", ls="-.", label=label))
        else:  # far above every level run: named, not drawn (it would flatten the measured lines)
            handles.append(Line2D([], [], ls="none", label=label + "\n(above the levels run)"))
    ax.set_xlabel("requests in flight (closed-loop level)")
    ax.set_ylabel("requests (count, the server's /metrics peak)")
    _fmt_axes(ax)
    _legend(fig, rect, handles)


def _serve_capacity_page(pdf: Any, a: Analysis) -> None:
    """Peak running and waiting requests per closed-loop level from the server's /metrics, with the prediction;
    the served ceiling table beneath."""
    s = a.serve
    if s is None:
        return
    t = _table(a, "serve_ceiling")
    d = s.serve[(s.serve["loop"] == "closed") & (s.serve["prefix_len"] == 0)]
    if d.empty or "tel_server_peak_requests_running" not in d or d["tel_server_peak_requests_running"].isna().all():
        if t is not None:
            table_page(pdf, t)
        return
    plot_with_table(pdf, _wrap(st_relabel(a, ceiling_finding(s) or "Served ceiling")), t,
                    lambda fig, rect: _draw_serve_capacity(fig, rect, a, d), max_table_share=0.4)


def _serve_capacity_markdown(a: Analysis) -> list[str]:
    if a.serve is None:
        return []
    t = _table(a, "serve_ceiling")
    finding = ceiling_finding(a.serve) or "No served ceiling measured or predicted"
    return [st_relabel(a, f"## Serve capacity\n\n{finding}.\n")] + ([t.markdown()] if t is not None else [])


def _environment(a: Analysis) -> Table:
    m = a.res.manifest
    rows = [("sweep", m.get("name")), ("status", m.get("status")), ("schema", m.get("schema_version")),
            ("spec hash", m.get("spec_hash")), ("host", m.get("host")), ("platform", m.get("platform")),
            ("python", m.get("python")), ("kvprof", m.get("kvprof_version")), ("probe", m.get("probe")),
            ("synthetic", "yes — generated, not measured" if a.res.synthetic else "no")]
    e = a.res.engines
    if not e.empty:
        rows += [("vLLM", ", ".join(sorted(map(str, e["vllm_version"].dropna().unique())))),
                 ("torch", ", ".join(sorted(map(str, e["torch_version"].dropna().unique())))),
                 ("device", ", ".join(sorted(map(str, e["device"].dropna().unique())))),
                 ("engine mode", "; ".join(sorted(map(str, e["engine_mode"].dropna().unique()))) or "—"),
                 ("telemetry unavailable", "; ".join(sorted(set(e["telemetry_unavailable"].dropna()))) or "—")]
    pts = a.res.points
    failed = 0 if pts.empty else int((pts["status"] != "ok").sum())
    rows.append(("failed points", f"{failed} (listed on the next page)" if failed else "none"))
    if "trust_remote_code" in (a.res.spec_text or ""):
        rows.append(("trust_remote_code", "set by the spec"))
    return Table("Environment", pd.DataFrame([{"item": k, "value": textwrap.shorten(str(v), 150)}
                                              for k, v in rows]))


def _banner(a: Analysis) -> str | None:
    return ("SYNTHETIC DATA — generated by a test helper with injected parameters, not measured"
            if a.res.synthetic else None)


def _setup_page(pdf: Any, a: Analysis) -> None:
    """Page two: how the run was set up, and the headline findings in words."""
    st = _style(a)
    text_page(pdf, "Setup and headline findings", [("Setup", [st.relabel(x) for x in setup_lines(a)]),
                                                   ("Headline", [st.relabel(x) for x in headline(a)])])


def _setup_markdown(a: Analysis) -> list[str]:
    st = _style(a)
    return ["## Setup\n\n" + "\n".join(f"- {st.relabel(x)}" for x in setup_lines(a)) + "\n",
            "## Headline\n\n" + "\n".join(f"- {st.relabel(x)}" for x in headline(a)) + "\n"]


# --- the page registry ---------------------------------------------------------------------------

def _no_markdown(a: Analysis) -> list[str]:
    return []


@dataclass(frozen=True)
class ReportPage:
    """One entry of the report. ``render`` draws its page(s) into report.pdf (a ``Pages``: ``savefig`` for a
    figure page, ``table_page`` for a table), or nothing when the run has no data for it; ``markdown`` returns
    its sections of summary.md (none for a figure)."""

    name: str
    render: Callable[[Any, Analysis], None]
    markdown: Callable[[Analysis], list[str]] = _no_markdown


def _table_entry(key: str, *, in_pdf_when_empty: bool = True) -> ReportPage:
    """The page of the analysis table ``a.tables[key]`` (set beneath the tables before it where there is room);
    nothing where the analysis built no such table."""

    def render(pdf: Any, a: Analysis) -> None:
        table = _table(a, key)
        if table is not None and (in_pdf_when_empty or not table.frame.empty):
            table_page(pdf, table)

    def markdown(a: Analysis) -> list[str]:
        table = _table(a, key)
        return [table.markdown()] if table is not None else []

    return ReportPage(key, render, markdown)


def _with_tables(name: str, render: Callable[[Any, Analysis], None], *keys: str,
                 markdown: Callable[[Analysis], list[str]] | None = None) -> ReportPage:
    """A page that draws a plot with the tables ``keys`` it explains; summary.md gets those tables."""

    def md(a: Analysis) -> list[str]:
        out = markdown(a) if markdown is not None else []
        return out + [t.markdown() for k in keys if (t := _table(a, k)) is not None]

    return ReportPage(name, render, md)


# The report, in order: build_report walks this list for report.pdf and for summary.md, so a new page is
# one function registered here.
PAGES: list[ReportPage] = [
    ReportPage("answer", _answer_page, _answer_markdown),
    ReportPage("setup", _setup_page, _setup_markdown),
    _with_tables("capacity", _capacity_page, "capacity"),
    _with_tables("budget", _budget_page, "budget"),
    ReportPage("memory timeline", _plot_timeline),
    _with_tables("ceiling", _ceiling_page, "ceiling", "rounding"),
    ReportPage("throughput plot", _plot_throughput),
    ReportPage("decode plot", _decode_page, _fit_markdown),
    _table_entry("crossover"),
    _table_entry("decode"),
    ReportPage("bandwidth plot", _plot_bandwidth),
    _with_tables("settings plot", _settings_page, "kv_dtype"),
    # serve mode: each page only where the run has serve points
    ReportPage("served vs offline", _served_vs_offline_page, _served_vs_offline_markdown),
    ReportPage("serve latency vs load", _serve_load_page, _serve_load_markdown),
    ReportPage("serve frontier", _frontier_page, _frontier_markdown),
    ReportPage("serve capacity", _serve_capacity_page, _serve_capacity_markdown),
    _table_entry("serve_goodput"),
    _table_entry("serve_prefix"),
    _table_entry("claims"),
    _table_entry("divergences"),
    ReportPage("environment", lambda pdf, a: table_page(pdf, _environment(a)), lambda a: [_environment(a).markdown()]),
    _table_entry("failed", in_pdf_when_empty=False),  # the PDF lists failures only when there are some
]


# --- entry point ---------------------------------------------------------------------------------

def build_report(results_dir: str | Path, pdf_path: str | Path | None = None,
                 out_dir: str | Path | None = None, include_flagged: bool = False) -> dict[str, Path]:
    """Write report.pdf, summary.md (both from PAGES), results.parquet and calibration.json into ``out_dir``
    (default: the results directory; ``pdf_path`` moves the PDF); return their paths.

    Each file is written beside its place and renamed into it, so an interrupted or failed report leaves
    every earlier file whole. The three small files are prepared before the PDF is drawn and written
    after it, so they and the PDF come from one analysis. A calibration.json there from an earlier
    report is removed when this analysis has no decode fit (returned as ``calibration_removed``): a
    stale one would still feed ``kvprof plan --calibration``. Noisy or contended decode points are drawn
    hollow and left out of the fit unless ``include_flagged``.
    """
    res = load(results_dir)
    a = analyse(res, include_flagged)
    out = Path(out_dir) if out_dir is not None else Path(results_dir)
    pdf_path = Path(pdf_path) if pdf_path else out / "report.pdf"
    summary = "\n".join(part for page in PAGES for part in page.markdown(a)).encode()
    buf = io.BytesIO()
    results_table(a).to_parquet(buf, index=False)
    cal = (json.dumps(calibration(a), indent=2) + "\n").encode() if a.fit is not None else None
    with atomic_pdf(pdf_path) as raw:
        pdf = Pages(raw)  # tables flow beneath one another; a figure page starts a page of its own
        for page in PAGES:
            page.render(pdf, a)
        pdf.flush()
        info = raw.infodict()
        info["Title"] = f"kvprof report {res.manifest.get('name')}"
        info["Subject"] = "KV-cache theory vs vLLM measurements"
    written = {"pdf": pdf_path, "summary": out / "summary.md", "results": out / "results.parquet"}
    atomic_write_bytes(written["summary"], summary)
    atomic_write_bytes(written["results"], buf.getvalue())
    calibration_path = out / "calibration.json"
    if cal is not None:
        written["calibration"] = calibration_path
        atomic_write_bytes(calibration_path, cal)
    elif calibration_path.exists():
        calibration_path.unlink()
        written["calibration_removed"] = calibration_path
    return written
