"""The capacity pages: measured KV capacity against the prediction, where the device's memory went (the budget), the
memory timeline, and the concurrency ceiling (saturation).
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis.measured.pipeline import (
    Analysis,
)
from analysis.report.pages.common import (
    analysis_table,
    draw_series,
    engine_handles,
    engine_order,
    plot_axes,
    plot_legend,
    style_of,
)
from analysis.report.pdf import (
    plot_with_table,
    table_page,
    titled_page,
)
from analysis.report.style import plain


def _draw_capacity(fig: plt.Figure, rect: tuple, a: Analysis) -> None:
    st = style_of(a)
    cap = a.capacity.copy()
    cap["_o"] = cap["engine_id"].map(engine_order(st))
    cap = cap.sort_values("_o", ascending=False)
    ax1, ax2 = plot_axes(fig, rect, 2)
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
    plot_legend(fig, rect, [Patch(facecolor="white", edgecolor="black", label="ideal arithmetic"),
                        Patch(facecolor="white", edgecolor="black", hatch="///", label="allocator model"),
                        Patch(facecolor="grey", label="vLLM")])


def capacity_page(pdf: Any, a: Analysis) -> None:
    cap = a.capacity
    t = analysis_table(a, "capacity")
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
    st = style_of(a)
    engines = sorted(df["engine"].unique(), key=engine_order(st))
    axes = plot_axes(fig, rect, len(engines), cols=min(len(engines), 6), sharey=True)
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
    plot_legend(fig, rect, [Patch(color=_PART_COLORS.get(p, "#dddddd"), label=p) for p in parts])


def budget_page(pdf: Any, a: Analysis) -> None:
    """The KV budget table beneath the memory plot."""
    t = analysis_table(a, "budget")
    df = _memory_rows(a) if not a.capacity.empty else pd.DataFrame()
    if df.empty:
        if t is not None:
            table_page(pdf, t)
        return
    plot_with_table(pdf, "Memory: where the device memory goes — theory, vLLM's account, and what was measured", t,
                    lambda fig, rect: _draw_memory(fig, rect, a, df))


def timeline_pages(pdf: Any, a: Analysis, max_points: int = 1500, per_page: int = 8) -> None:
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
    _timeline(pdf, a, tel, col, label, "Memory timeline", 2**30, max_points, per_page)


def power_timeline_pages(pdf: Any, a: Analysis, max_points: int = 1500, per_page: int = 8) -> None:
    """The GPUs' board power over time (issue #29), summed over each engine's GPUs at each sample, phases marked:
    only where NVML gave power."""
    tel = a.res.telemetry(columns=["t", "device", "phase", "power_w"])
    if tel.empty:
        return
    tel = tel[tel["device"].astype(str).str.startswith("gpu")].dropna(subset=["power_w", "t"])
    if tel.empty:
        return
    summed = tel.groupby(["engine_id", "t"], as_index=False).agg(power_w=("power_w", "sum"), phase=("phase", "first"))
    _timeline(pdf, a, summed, "power_w", "board power (W, NVML; the engine's GPUs summed)", "Power timeline", 1.0,
              max_points, per_page)


def _timeline(pdf: Any, a: Analysis, tel: pd.DataFrame, col: str, label: str, title: str, unit: float,
              max_points: int, per_page: int) -> None:
    """One panel per engine of ``col`` ÷ ``unit`` over time in its colour, a line where each phase begins."""
    if tel.empty:
        return
    st = style_of(a)
    engines = sorted(tel["engine_id"].dropna().unique(), key=engine_order(st))
    for start in range(0, len(engines), per_page):
        chunk = engines[start:start + per_page]
        more = f" ({start // per_page + 1}/{math.ceil(len(engines) / per_page)})" if len(engines) > per_page else ""
        fig = titled_page(f"{title}: {label.split(' (')[0]} per engine, by phase{more}")
        rect = (0.0, 0.03, 1.0, 0.93)
        axes = plot_axes(fig, rect, len(chunk), cols=min(len(chunk), 4), sharey=True)
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
            ax.plot(t, g[col] / unit, "-", color=st.color(eid), lw=1.2, gid=st.gid(eid))
            ax.set_title(st.label(eid), fontsize=10, fontweight="bold", color=st.color(eid))
            ax.set_xlabel("time since launch (s)")
            ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
            ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
        axes[0].set_ylabel(label)
        plot_legend(fig, rect, [*engine_handles(st, chunk),
                            Line2D([], [], color="#b0b0b0", lw=0.8, label="a phase begins\n(named where wide)")])
        pdf.savefig(fig)
        plt.close(fig)


def _draw_saturation(fig: plt.Figure, rect: tuple, a: Analysis) -> None:
    st = style_of(a)
    sat = a.saturation
    cap = a.capacity.set_index("engine_id") if "ceiling_predicted" in a.capacity else None
    ax1, ax2 = plot_axes(fig, rect, 2)
    for eid, g in sat.groupby("engine_id"):
        c, gid = st.color(eid), st.gid(eid)
        draw_series(ax1, g["concurrency"], g["peak_running"], "-o", color=c, ms=4, gid=gid)
        draw_series(ax2, g["concurrency"], g["preemptions"], "-o", color=c, ms=4, gid=gid)
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
    plot_legend(fig, rect, [*engine_handles(st, sat["engine_id"]),
                        Line2D([], [], color="black", ls="--", label="predicted ceiling"),
                        Line2D([], [], color="grey", ls=":", label="all requests running")])


def _saturation_title(a: Analysis) -> str:
    sat = a.saturation
    bad = sat[(sat["concurrency"] <= sat["predicted_ceiling"]) & ~sat["ran_together"].astype(bool)]
    if not bad.empty:
        return f"Concurrency ceiling: {len(bad)} points preempted or queued at or below the predicted ceiling"
    return "Concurrency ceiling: requests preempt or queue only above the predicted ceiling"


def ceiling_page(pdf: Any, a: Analysis) -> None:
    """The ceiling and block-rounding tables beneath the saturation plot (running requests and preemptions)."""
    t = analysis_table(a, "ceiling")
    rnd = analysis_table(a, "rounding")
    if a.saturation.empty:
        for x in (t, rnd):
            if x is not None:
                table_page(pdf, x)
        return
    plot_with_table(pdf, _saturation_title(a), t, lambda fig, rect: _draw_saturation(fig, rect, a))
    if rnd is not None:
        table_page(pdf, rnd)
