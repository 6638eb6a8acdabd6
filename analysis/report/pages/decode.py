"""The decode pages: throughput and step time by batch against the fitted model, effective bandwidth, and the
settings' effect.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

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
    spread_bars,
    style_of,
)
from analysis.report.pdf import (
    plot_with_table,
    table_page,
    titled_page,
)
from analysis.report.style import plain, scale_axis
from analysis.table import fbw, fms, fnum


def throughput_page(pdf: Any, a: Analysis) -> None:
    sat = a.saturation
    if sat.empty:
        return
    st = style_of(a)
    verdict = a.claims.set_index("claim")["verdict"].get("Throughput stops rising once the KV pool is full", "")
    trend = "stays flat" if verdict == "holds" else "still changes"
    fig = titled_page(f"Throughput vs submitted requests: past the full KV pool it {trend}")
    rect = (0.0, 0.03, 1.0, 0.93)
    (ax,) = plot_axes(fig, rect, 1)
    cap = a.capacity.set_index("engine_id") if "ceiling_predicted" in a.capacity else None
    for eid, g in sat.groupby("engine_id"):
        draw_series(ax, g["concurrency"], g["output_tokens_per_s"], "-o", color=st.color(eid), ms=4, gid=st.gid(eid))
        if cap is not None and eid in cap.index and pd.notna(cap.loc[eid, "ceiling_predicted"]):
            ax.axvline(cap.loc[eid, "ceiling_predicted"], color=st.color(eid), ls="--", lw=1, gid=st.gid(eid))
    ax.set_xlabel("requests submitted together (count)")
    ax.set_ylabel("output tokens/s (engine step time only)")
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: plain(v)))
    ax.grid(alpha=0.3)
    plot_legend(fig, rect, [*engine_handles(st, sat["engine_id"]),
                        Line2D([], [], color="black", ls="--", label="predicted ceiling")])
    pdf.savefig(fig)
    plt.close(fig)


def _draw_by_batch(fig: plt.Figure, rect: tuple, a: Analysis, metric: str) -> None:
    """One panel per batch; per engine in its colour: measured points, and (decode) the fit and the roofline as
    lines over context. ``metric``: 'step' (ms) or 'bandwidth' (GB/s)."""
    st = style_of(a)
    dec = a.decode
    batches = sorted(dec["concurrency"].unique())
    axes = plot_axes(fig, rect, len(batches), cols=min(len(batches), 4 if len(batches) <= 8 else 6),
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
                lo, hi = spread_bars(e)
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
                        draw_series(ax, e["mean_context"], 1e3 * e[col], "", ls=ls, color=c, lw=1.2, alpha=0.8, gid=gid)
                        used[col] = ls
                        ys += list(1e3 * e[col].dropna())
                t_star = e["crossover_context"].iloc[0] if "crossover_context" in e else None
                if t_star and pd.notna(t_star) and t_star <= dec["mean_context"].max() * 1.05:
                    ax.axvline(t_star, color=c, ls="-.", lw=1, alpha=0.7, gid=gid)
                    used["t*"] = "-."
            else:
                draw_series(ax, e["mean_context"], e["model_implied_Bps"] / 1e9, "-o", color=c, ms=4, gid=gid)
                ys += list(e["model_implied_Bps"] / 1e9)
                if "gpm_implied_Bps" in e and e["gpm_implied_Bps"].notna().any():
                    draw_series(ax, e["mean_context"], e["gpm_implied_Bps"] / 1e9, "--s", color=c, ms=3, gid=gid)
                    used["gpm"] = "--"
        ax.set_title(f"batch {b}", fontsize=10)
        ax.set_xlabel("mean context during decode (tokens)")
        scale_axis(ax, "x", [], nbins=4 if len(batches) > 2 else 6)  # linear: step time is linear in context
        scale_axis(ax, "y", [])
        ax.grid(alpha=0.3)
    ylabel = "decode step time (ms)" if metric == "step" else "bandwidth (GB/s, model bytes ÷ measured step)"
    for ax in axes[:: min(len(batches), 4 if len(batches) <= 8 else 6)]:
        ax.set_ylabel(ylabel)
    handles = engine_handles(st, dec["engine_id"])
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
    plot_legend(fig, rect, handles)


def _decode_title(a: Analysis) -> str:
    f = a.fit
    if f is None:
        return "Decode step time vs context per batch, with roofline and fit"
    flops = f" + FLOPs / {f.effective_flops / 1e9:,.0f} GFLOP/s" if f.effective_flops else ""
    return (f"Decode{f', {f.regime.kind}-dominated' if f.regime else ''}: step time = "
            f"{fms(f.step_overhead_s)} + bytes / {fbw(f.effective_bandwidth_Bps)}{flops} (R² {f.r2:.2f})")


def decode_page(pdf: Any, a: Analysis) -> None:
    """Step time vs context, one panel per batch, with the fit table beneath; then the crossover and every
    decode point."""
    fit = analysis_table(a, "fit")
    if fit is not None and a.fit is not None and a.fit.regime:
        fit = replace(fit, note=a.fit.regime.sentence)
    if a.decode.empty:
        if fit is not None:
            table_page(pdf, fit)
        return
    plot_with_table(pdf, _decode_title(a), fit, lambda fig, rect: _draw_by_batch(fig, rect, a, "step"),
                    max_table_share=0.3)


def fit_markdown(a: Analysis) -> list[str]:
    """The fit in summary.md: the regime sentence first, then the fitted numbers."""
    t = analysis_table(a, "fit")
    if t is None:
        return []
    regime = a.fit.regime.sentence if a.fit is not None and a.fit.regime else ""
    body = replace(t, note="").markdown().split("\n\n", 1)[1].rstrip("\n")  # Table.markdown's table alone
    return [f"### {t.title}\n\n" + (f"{regime}\n\n" if regime else "") + f"{body}\n"]


def bandwidth_page(pdf: Any, a: Analysis) -> None:
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
    st = style_of(a)
    dec = a.decode
    ax1, ax2 = plot_axes(fig, rect, 2)
    med = dec.groupby(["engine_id", "concurrency"])["decode_step_s"].median().reset_index()
    batches = sorted(med["concurrency"].unique())
    engines = sorted(med["engine_id"].unique(), key=engine_order(st))
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
        c = cap.assign(_o=cap["engine_id"].map(engine_order(st))).sort_values("_o")
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
    plot_legend(fig, rect, [Line2D([], [], color=st.color(e), lw=6,
                               label=f"{st.label(e)} {_settings_of(a, e)}") for e in engines])


def _settings_of(a: Analysis, eid: str) -> str:
    e = a.res.engines.set_index("engine_id")
    if eid not in e.index:
        return ""
    r = e.loc[eid]
    return f"{r['kv_cache_dtype']}, block {r['block_size']}\nlen {fnum(r['max_model_len'])}"


def settings_page(pdf: Any, a: Analysis) -> None:
    """Decode step and capacity per engine setting, with the fp8-vs-16-bit table beneath."""
    t = analysis_table(a, "kv_dtype")
    if a.decode.empty:
        if t is not None:
            table_page(pdf, t)
        return
    plot_with_table(pdf, "Block size and KV dtype: effect on decode step time and capacity", t,
                    lambda fig, rect: _draw_settings(fig, rect, a), max_table_share=0.4)
