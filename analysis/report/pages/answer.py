"""Page one, the answer: sequences that fit per engine and length, decode step and TPOT per batch, the largest
divergences between prediction and measurement, and one figure.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D

from analysis.measured.pipeline import (
    Analysis,
    capacity_at_lengths,
    energy_headline,
)
from analysis.report.pages.common import (
    _H,
    PAGE_W,
    SOURCES,
    continued_table,
    engine_handles,
    engine_order,
    ms_text,
    pct_text,
    pick,
    relative_error,
    style_of,
    table_height,
    value_text,
)
from analysis.report.pages.setup import run_banner
from analysis.report.pdf import (
    PAGE,
    set_table,
    table_page,
)
from analysis.report.style import TOLERANCE, scale_axis, severity_color
from analysis.table import GROUP_SEP, Table, fnum


def capacity_answer(a: Analysis) -> tuple[Table, pd.DataFrame] | None:
    """Sequences that fit per engine (rows: ideal, allocator model, vLLM's pool, measured) at up to four swept
    lengths, the saturation length and max_model_len (columns); the long frame it comes from (every length)."""
    cl = capacity_at_lengths(a)
    if cl.empty:
        return None
    st = style_of(a)
    swept = pick(sorted(cl.loc[cl["kind"] == "decode", "length"].unique().tolist()), 4)
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
    for eid in sorted(cl["engine_id"].unique(), key=engine_order(st)):
        g = cl[cl["engine_id"] == eid]
        g = pd.concat([g, g[g["kind"] == "max_model_len"].assign(length=-1)]).drop_duplicates("length", keep="last")
        g = g.set_index("length")
        for i, (col, name) in enumerate(SOURCES[:3]):
            row = {"engine": st.label(eid) if i == 0 else "", "source": name}
            for L in lengths:
                h = heads[L]
                if L not in g.index:
                    row[h], c = "·", None
                else:
                    row[h] = fnum(g.loc[L, col])
                    c = severity_color(relative_error(g.loc[L, "model"], g.loc[L, col])) if col == "vllm" else None
                colors[h].append(c)
            if not sat.empty:  # the saturation phase's ceiling, on the vLLM row (it measured vLLM)
                m = sat[sat["engine_id"] == eid]
                text, c = "·", None
                if col == "vllm" and not m.empty:
                    r = m.iloc[0]
                    text = f"≥{fnum(r['measured_at_least'])}" + (
                        f", <{fnum(r['measured_below'])}" if pd.notna(r["measured_below"]) else "")
                    c = severity_color(relative_error(r["model"], r["measured_at_least"]))
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
    st = style_of(a)
    roof = next((c for c in ("roofline_spec_s", "roofline_probe_s") if c in dec and dec[c].notna().any()), None)
    roof_name = {"roofline_spec_s": "roofline (spec)", "roofline_probe_s": "roofline (probed)"}.get(roof, "roofline")
    ref = _reference_points(dec)
    predicted = "predicted_s" in dec and dec["predicted_s"].notna().any()
    batches = pick(sorted(int(b) for b in ref["concurrency"].unique()), most)
    rows: list[dict[str, str]] = []
    colors: dict[str, list[str | None]] = {}
    for eid in sorted(ref["engine_id"].unique(), key=engine_order(st)):
        g = ref[ref["engine_id"] == eid].set_index("concurrency")
        row = {"engine": st.label(eid), "context (tokens)": fnum(round(g["mean_context"].max()))}
        for b in batches:
            r = g.loc[b] if b in g.index else None
            step = r["decode_step_s"] if r is not None else None
            rv = r.get(roof) if r is not None and roof else None
            fv = r.get("fitted_s") if r is not None else None
            pv = r.get("predicted_s") if r is not None and predicted else None
            cells = {f"batch {b}{GROUP_SEP}{roof_name}": (ms_text(rv), severity_color(relative_error(rv, step)))}
            if predicted:  # the spec-sheet prediction a buyer plans with, beside the measurement (fit: decode page)
                cells[f"batch {b}{GROUP_SEP}predicted"] = (ms_text(pv), None)
                cells[f"batch {b}{GROUP_SEP}step"] = (ms_text(step), severity_color(relative_error(pv, step)))
            else:
                cells[f"batch {b}{GROUP_SEP}fit"] = (ms_text(fv), None)
                cells[f"batch {b}{GROUP_SEP}step"] = (ms_text(step), severity_color(relative_error(fv, step)))
            cells |= {
                     f"batch {b}{GROUP_SEP}TPOT": (ms_text(r.get("tpot_s") if r is not None else None), None)}
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


PLAN_DIVERGENCE = "decode step, kvprof plan (spec sheet)"


def divergences_answer(a: Analysis, most: int = 6) -> Table | None:
    """The largest divergence of each kind of quantity (not several noisy points of one kind)."""
    d = a.divergences
    if d.empty or "rel_error" not in d:
        return None
    st = style_of(a)
    top = d.dropna(subset=["rel_error"])
    top = top[top["rel_error"].abs() > 1e-9].drop_duplicates("quantity")
    # the spec-sheet prediction a buyer plans with comes first: how far the machine was from it
    first = top["quantity"] == PLAN_DIVERGENCE
    top = pd.concat([top[first], top[~first]]).head(most)
    if top.empty:
        return None
    frame = pd.DataFrame([{"quantity": r.quantity, "where": st.relabel(r.where).replace(" c=", ", batch ")
                           .replace(" ctx=", ", ctx "),
                           "predicted": value_text(r.quantity, r.predicted),
                           "measured": value_text(r.quantity, r.measured),
                           "error (%)": pct_text(r.rel_error)} for r in top.itertuples(index=False)])
    return Table("Largest divergence of each quantity", frame,
                 colors={"error (%)": [severity_color(x) for x in top["rel_error"]]},
                 text_colors={st.label(e): c for e, c in st.colors.items()})


def capacity_figure(fig: plt.Figure, rect: tuple[float, float, float, float], a: Analysis,
                     cl: pd.DataFrame) -> None:
    """Sequences that fit vs sequence length per engine: the allocator model (line), vLLM's pool (circles), the
    saturation phase's measured ceiling (diamond)."""
    st = style_of(a)
    legend_w = 118 / PAGE_W
    ax = fig.add_axes((rect[0] + 44 / PAGE_W, rect[1] + 34 / _H, rect[2] - rect[0] - 44 / PAGE_W - legend_w,
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
    handles = engine_handles(st, cl["engine_id"])
    handles += [Line2D([], [], color="black", lw=1.6, label="allocator model"),
                Line2D([], [], color="black", marker="o", mfc="none", ls="none", label="vLLM's pool"),
                Line2D([], [], color="black", marker="D", ls="none", label="measured (saturation)")]
    fig.legend(handles=handles, loc="upper left", fontsize=8, frameon=False,
               bbox_to_anchor=(rect[2] - legend_w + 4 / PAGE_W, rect[3] - 20 / _H))


def _subtitle(a: Analysis) -> str:
    m, e = a.res.manifest, a.res.engines
    first = e.iloc[0] if not e.empty else a.res.servers.iloc[0] if not a.res.servers.empty else None
    pts = a.res.points
    ok = int((pts["status"] == "ok").sum()) if not pts.empty else 0
    get = (lambda k: first.get(k) if first is not None else None)  # noqa: E731
    return (f"Model {get('model') or '—'}  ·  {get('gpu_name') or get('device') or '—'}  ·  vLLM "
            f"{get('vllm_version') or '—'}  ·  {len(e)} engine configuration(s)  ·  {ok} of {len(pts)} points ok"
            f"  ·  sweep {m.get('name')}")


def answer_page(pdf: Any, a: Analysis) -> None:
    """Page one: the sequences that fit (left), one figure and the largest divergences (right), the decode step
    and TPOT per batch (beneath both). Rows that do not fit continue on the next page."""
    st = style_of(a)
    fig = plt.figure(figsize=PAGE)
    fig.suptitle(f"kvprof report — {a.res.manifest.get('name')}", fontsize=16, fontweight="bold", x=0.02, ha="left")
    y = _H - 56
    if banner := run_banner(a):
        fig.text(0.02, (y - 12) / _H, banner, fontsize=12, color="white", fontweight="bold",
                 bbox={"facecolor": "#b00020", "edgecolor": "none", "pad": 3})
        y -= 30
    fig.text(22 / PAGE_W, (y - 9) / _H, _subtitle(a), fontsize=9)
    y -= 14
    fig.text(22 / PAGE_W, (y - 9) / _H, energy_headline(a), fontsize=9)
    y -= 20
    ids = sorted(st.labels, key=engine_order(st))
    per_line = 4
    for i in range(0, len(ids), per_line):
        for k, eid in enumerate(ids[i:i + per_line]):
            x = 22 + k * 200
            fig.text(x / PAGE_W, (y - 8) / _H, st.label(eid), fontsize=9, fontweight="bold", color=st.color(eid))
            fig.text((x + 20) / PAGE_W, (y - 8) / _H, eid, fontsize=8)
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
            rest.append(continued_table(cap[0], n))
        left_end = y - table_height(cap[0], n, left_w)
        fig_h = 165.0
        capacity_figure(fig, (right_x / PAGE_W, (y - fig_h) / _H, (PAGE_W - 14) / PAGE_W, y / _H), a, cap[1])
        right_end = y - fig_h - 8
    if div is not None:  # no lower than the left column ends, so the decode table beneath keeps its room
        n = set_table(fig, div, right_x, right_end, max(bottom + 100, left_end), PAGE_W - right_x - 22)
        if n < len(div.frame):
            rest.append(continued_table(div, n))
        right_end -= table_height(div, n, PAGE_W - right_x - 22)
    if tpot is not None:
        top = min(left_end, right_end) - 10
        n = set_table(fig, tpot, 22, top, bottom, PAGE_W - 44) if top - bottom > 70 else 0
        if n < len(tpot.frame):
            rest.insert(0, continued_table(tpot, n))
    pdf.savefig(fig)
    plt.close(fig)
    for t in rest:
        table_page(pdf, t)


def answer_markdown(a: Analysis) -> list[str]:
    st = style_of(a)
    parts = [f"# kvprof report — {a.res.manifest.get('name')}\n"]
    if banner := run_banner(a):
        parts.append(f"**{banner}**\n")
    parts.append(_subtitle(a) + "\n")
    parts.append(energy_headline(a) + "\n")
    key = pd.DataFrame([{"label": st.label(e), "engine configuration": e}
                        for e in sorted(st.labels, key=engine_order(st))])
    if not key.empty:
        parts.append("Engines:\n\n" + key.to_markdown(index=False, disable_numparse=True) + "\n")
    cap = capacity_answer(a)
    for t in (cap[0] if cap else None, tpot_answer(a), divergences_answer(a)):
        if t is not None:
            parts.append(t.markdown())
    return parts
