"""The serve pages: the served engine beside the offline step, latency under load, the throughput-latency frontier,
and the served concurrency ceiling.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D

from analysis.measured.pipeline import (
    Analysis,
    ceiling_finding,
    overhead_finding,
)
from analysis.measured.serve import ServeAnalysis, level_text
from analysis.report.pages.common import (
    analysis_table,
    draw_series,
    engine_handles,
    format_axes,
    plot_axes,
    plot_legend,
    st_relabel,
    style_of,
    wrap_title,
)
from analysis.report.pdf import (
    plot_with_table,
    table_page,
)
from analysis.table import fms


def _draw_served_vs_offline(fig: plt.Figure, rect: tuple, a: Analysis) -> None:
    """Served TPOT and ITL against the offline decode step at the same batch and context, with the fitted line."""
    st = style_of(a)
    m, f = a.serve.matched, a.serve.fit
    (ax,) = plot_axes(fig, rect, 1)
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
    handles = [*engine_handles(st, m["engine_id"]),
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
    format_axes(ax)
    plot_legend(fig, rect, handles)


def served_vs_offline_page(pdf: Any, a: Analysis) -> None:
    s = a.serve
    if s is None:
        return
    t = analysis_table(a, "serve_offline")
    if s.matched.empty:
        if t is not None:
            table_page(pdf, t)
        return
    plot_with_table(pdf, wrap_title(st_relabel(a, overhead_finding(s) or "Served vs offline")), t,
                    lambda fig, rect: _draw_served_vs_offline(fig, rect, a), max_table_share=0.35)


def served_vs_offline_markdown(a: Analysis) -> list[str]:
    s = a.serve
    if s is None:
        return []
    head = [f"## Served vs offline\n\n{overhead_finding(s) or 'No serve point matches an offline decode point.'}."
            + (f" {s.fit.sentence}." if s.fit else "") + f"\n\n{s.tokenizer_sentence}\n"]
    t = analysis_table(a, "serve_offline")
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
    st = style_of(a)
    axes = plot_axes(fig, rect, 2 * len(panels), cols=2)
    workloads: dict[tuple, str] = {}
    for k, (df, x, label) in enumerate(panels):
        for ax, metric, name in ((axes[2 * k], "ttft", "TTFT"), (axes[2 * k + 1], "tpot", "TPOT")):
            for (eid, p, o, pre), g in df.groupby(["engine_id", "prompt_len", "output_len", "prefix_len"], sort=True):
                mk = workloads.setdefault((p, o, pre), _WORKLOAD_MARKERS[len(workloads) % len(_WORKLOAD_MARKERS)])
                for q, ls in (("p50", "-"), ("p99", ":")):
                    draw_series(ax, g[x], 1e3 * g[f"{metric}_{q}_s"], ls, marker=mk, ms=4, color=st.color(eid),
                            gid=st.gid(eid))
            ax.set_xlabel(label)
            ax.set_ylabel(f"{name} (ms)")
            ax.set_title(f"{name} p50 (solid) and p99 (dotted)", fontsize=9)
            format_axes(ax)
    eids = pd.concat([df["engine_id"] for df, _, _ in panels])
    plot_legend(fig, rect, [*engine_handles(st, eids),
                        *[Line2D([], [], color="black", marker=mk, ls="none",
                                 label=f"p{p}/o{o}" + (f"/prefix {pre}" if pre else ""))
                          for (p, o, pre), mk in workloads.items()],
                        Line2D([], [], color="black", ls="-", label="p50"),
                        Line2D([], [], color="black", ls=":", label="p99 (p90 in the table)")])


def serve_load_page(pdf: Any, a: Analysis) -> None:
    """TTFT and TPOT percentiles vs concurrency (closed loop) and vs request rate (open loop), table beneath."""
    s = a.serve
    if s is None:
        return
    t = analysis_table(a, "serve_load")
    panels = [(df, x, label) for df, x, label in ((s.closed, "concurrency", "requests in flight (closed loop)"),
                                                  (s.open, "request_rate", "request rate (req/s, open loop)"))
              if not df.empty]
    if not panels:
        if t is not None:
            table_page(pdf, t)
        return
    plot_with_table(pdf, wrap_title(_load_finding(s)), t, lambda fig, rect: _draw_serve_load(fig, rect, a, panels),
                    max_table_share=0.4)


def serve_load_markdown(a: Analysis) -> list[str]:
    if a.serve is None:
        return []
    t = analysis_table(a, "serve_load")
    return [f"## Serve latency vs load\n\n{_load_finding(a.serve)}.\n"] + ([t.markdown()] if t is not None else [])


def _frontier_finding(s: ServeAnalysis) -> str:
    f = s.frontier.dropna(subset=["latency_s", "output_tokens_per_s"]) if not s.frontier.empty else s.frontier
    if f.empty:
        return "Throughput–latency frontier: no point with both throughput and latency"
    best = f.loc[f["output_tokens_per_s"].idxmax()]
    return (f"Throughput–latency frontier: {int(f['pareto'].sum())} of {len(f)} points Pareto-efficient; most "
            f"{best['output_tokens_per_s']:,.0f} tokens/s at {level_text(best)} (TPOT p50 {fms(best['latency_s'])})")


def _draw_frontier(fig: plt.Figure, rect: tuple, a: Analysis, f: pd.DataFrame) -> None:
    st = style_of(a)
    (ax,) = plot_axes(fig, rect, 1)
    other = f[~f["pareto"].astype(bool)]
    best = f[f["pareto"].astype(bool)]
    ax.plot(1e3 * other["latency_s"], other["output_tokens_per_s"], "o", color="#b0b0b0", ls="none")
    workloads: dict[tuple, str] = {}
    for (eid, p, o, pre), g in best.groupby(["engine_id", "prompt_len", "output_len", "prefix_len"]):
        mk = workloads.setdefault((p, o, pre), _WORKLOAD_MARKERS[len(workloads) % len(_WORKLOAD_MARKERS)])
        draw_series(ax, 1e3 * g["latency_s"], g["output_tokens_per_s"], "-", marker=mk, color=st.color(eid),
                gid=st.gid(eid))
    for r in f.to_dict("records"):
        ax.annotate(level_text(r), (1e3 * r["latency_s"], r["output_tokens_per_s"]), textcoords="offset points",
                    xytext=(4, 4), fontsize=8)
    ax.set_xlabel("TPOT p50 (ms)")
    ax.set_ylabel("output tokens/s (served)")
    format_axes(ax)
    plot_legend(fig, rect, [*engine_handles(st, f["engine_id"]),
                        *[Line2D([], [], color="black", marker=mk, label=f"Pareto-efficient, p{p}/o{o}"
                                 + (f"/prefix {pre}" if pre else "")) for (p, o, pre), mk in workloads.items()],
                        Line2D([], [], color="#b0b0b0", marker="o", ls="none", label="dominated")])


def frontier_page(pdf: Any, a: Analysis) -> None:
    s = a.serve
    if s is None:
        return
    t = analysis_table(a, "serve_frontier")
    f = s.frontier.dropna(subset=["latency_s", "output_tokens_per_s"]) if not s.frontier.empty else s.frontier
    if f.empty:
        if t is not None:
            table_page(pdf, t)
        return
    plot_with_table(pdf, wrap_title(_frontier_finding(s)), t, lambda fig, rect: _draw_frontier(fig, rect, a, f),
                    max_table_share=0.4)


def frontier_markdown(a: Analysis) -> list[str]:
    if a.serve is None:
        return []
    t = analysis_table(a, "serve_frontier")
    return [f"## Serve frontier\n\n{_frontier_finding(a.serve)}.\n"] + ([t.markdown()] if t is not None else [])


def _draw_serve_capacity(fig: plt.Figure, rect: tuple, a: Analysis, d: pd.DataFrame) -> None:
    st = style_of(a)
    s = a.serve
    (ax,) = plot_axes(fig, rect, 1)
    workloads: dict[tuple, str] = {}
    for (eid, p, o), g in d.groupby(["engine_id", "prompt_len", "output_len"]):
        mk = workloads.setdefault((p, o), _WORKLOAD_MARKERS[len(workloads) % len(_WORKLOAD_MARKERS)])
        draw_series(ax, g["concurrency"], g["tel_server_peak_requests_running"], "-", marker=mk, color=st.color(eid),
                gid=st.gid(eid))
        if "tel_server_peak_requests_waiting" in g:
            draw_series(ax, g["concurrency"], g["tel_server_peak_requests_waiting"], "--", marker=mk, mfc="none",
                    color=st.color(eid), gid=st.gid(eid))
    lim = float(d["concurrency"].max())
    ax.plot([0, lim], [0, lim], ":", color="grey")
    handles = [*engine_handles(st, d["engine_id"]),
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
    format_axes(ax)
    plot_legend(fig, rect, handles)


def serve_capacity_page(pdf: Any, a: Analysis) -> None:
    """Peak running and waiting requests per closed-loop level from the server's /metrics, with the prediction;
    the served ceiling table beneath."""
    s = a.serve
    if s is None:
        return
    t = analysis_table(a, "serve_ceiling")
    d = s.serve[(s.serve["loop"] == "closed") & (s.serve["prefix_len"] == 0)]
    if d.empty or "tel_server_peak_requests_running" not in d or d["tel_server_peak_requests_running"].isna().all():
        if t is not None:
            table_page(pdf, t)
        return
    plot_with_table(pdf, wrap_title(st_relabel(a, ceiling_finding(s) or "Served ceiling")), t,
                    lambda fig, rect: _draw_serve_capacity(fig, rect, a, d), max_table_share=0.4)


def serve_capacity_markdown(a: Analysis) -> list[str]:
    if a.serve is None:
        return []
    t = analysis_table(a, "serve_ceiling")
    finding = ceiling_finding(a.serve) or "No served ceiling measured or predicted"
    return [st_relabel(a, f"## Serve capacity\n\n{finding}.\n")] + ([t.markdown()] if t is not None else [])
