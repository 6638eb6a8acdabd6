"""The single-run report: its pages, registered in order in ``PAGES``, and ``build_report``, which walks them
into report.pdf and summary.md (and writes results.parquet and calibration.json); the analysis is analysis.pipeline.

Plot titles state the finding; axes carry units.
"""

from __future__ import annotations

import io
import json
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_pdf import PdfPages

from analysis.load import load
from analysis.pdf_pages import (
    PAGE,
    Table,
    atomic_pdf,
    fbw,
    fms,
    save_page,
    table_page,
    text_page,
    titled_page,
)
from analysis.pipeline import (
    Analysis,
    analyse,
    calibration,
    ceiling_finding,
    headline,
    overhead_finding,
    results_table,
    setup_lines,
)
from analysis.results_schema import atomic_write_bytes
from analysis.serve_analysis import ServeAnalysis, level_text

# --- pages -------------------------------------------------------------------------------------

def _plot_capacity(pdf: PdfPages, a: Analysis) -> None:
    cap = a.capacity
    if cap.empty or "num_blocks_predicted" not in cap:
        return
    exact = (cap["blocks_error"].abs() <= cap["blocks_tolerance"]).all()
    fig = titled_page("Capacity: vLLM's KV blocks " + ("equal the allocator model on every engine" if exact
                                                       else "diverge from the allocator model"))
    ax1, ax2 = fig.subplots(1, 2)
    long = cap.melt(id_vars=["engine_id"], value_vars=["num_blocks_predicted", "num_blocks_vllm"],
                    var_name="source", value_name="blocks")
    long["source"] = long["source"].map({"num_blocks_predicted": "model", "num_blocks_vllm": "vLLM"})
    sns.barplot(data=long, y="engine_id", x="blocks", hue="source", ax=ax1, orient="h")
    ax1.set_xlabel("KV blocks (count)")
    ax1.set_ylabel("engine")
    ax1.set_title("KV blocks per engine")
    conc = cap.melt(id_vars=["engine_id"], value_vars=[c for c in ("ideal_max_concurrency",
                                                                    "max_concurrency_predicted",
                                                                    "max_concurrency_vllm") if c in cap],
                    var_name="source", value_name="sequences")
    conc["source"] = conc["source"].map({"ideal_max_concurrency": "ideal (textbook)",
                                         "max_concurrency_predicted": "allocator model",
                                         "max_concurrency_vllm": "vLLM reported"})
    sns.barplot(data=conc, y="engine_id", x="sequences", hue="source", ax=ax2, orient="h")
    ax2.set_xlabel("max concurrency at max_model_len (sequences)")
    ax2.set_ylabel("")
    ax2.set_yticklabels([])
    ax2.set_title("Sequences that fit at max_model_len")
    save_page(pdf, fig)


def _plot_memory(pdf: PdfPages, a: Analysis) -> None:
    """Stacked bars per engine: theory vs vLLM vs measured (NVML on GPU, process RSS on CPU)."""
    rows = []
    pts = a.res.points
    for r in a.capacity.to_dict("records"):
        eid = r["engine_id"]
        e = a.res.engines.set_index("engine_id").loc[eid]
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
    df = pd.DataFrame(rows, columns=["engine", "source", "part", "bytes"]).dropna()
    if df.empty:
        return
    fig = titled_page("Memory: where the device memory goes — theory, vLLM's account, and what was measured")
    engines = df["engine"].unique()[:6]
    axes = fig.subplots(1, len(engines), squeeze=False)[0]
    parts = list(dict.fromkeys(df["part"]))
    colors = dict(zip(parts, sns.color_palette("tab10", len(parts)), strict=False))
    for ax, eid in zip(axes, engines, strict=False):
        sub = df[df["engine"] == eid]
        for i, src in enumerate(["theory", "vLLM", "measured"]):
            bottom = 0.0
            for part in parts:
                v = sub[(sub["source"] == src) & (sub["part"] == part)]["bytes"].sum()
                if v:
                    ax.bar(i, v / 2**30, bottom=bottom, color=colors[part], label=part)
                    bottom += v / 2**30
        ax.set_xticks(range(3), ["theory", "vLLM", "measured"])
        ax.set_title(textwrap.fill(eid, 26), fontsize=8)
        ax.set_ylabel("GiB")
    handles = {h.get_label(): h for ax in axes for h in ax.get_legend_handles_labels()[0]}
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=len(handles))
    save_page(pdf, fig, rect=(0, 0.06, 1, 0.93))


def _plot_timeline(pdf: PdfPages, a: Analysis, max_points: int = 1500) -> None:
    """Memory over time per engine, coloured by phase (downsampled for plotting)."""
    tel = a.res.telemetry(columns=["t", "device", "phase", "mem_used_bytes", "rss_bytes"])
    if tel.empty:
        return
    gpu = tel["device"].astype(str).str.startswith("gpu")  # not the host, nor a served engine's /metrics rows
    host = tel["device"] == "host"
    col, label = (("mem_used_bytes", "device memory used (GiB, NVML)") if tel.loc[gpu, "mem_used_bytes"].notna().any()
                  else ("rss_bytes", "engine process-tree RSS (GiB)"))
    tel = tel[gpu] if col == "mem_used_bytes" else tel[host]
    tel = tel.dropna(subset=[col])
    if tel.empty:
        return
    engines = list(tel["engine_id"].unique())[:6]
    fig = titled_page(f"Memory timeline: {label.split(' (')[0]} per engine, by phase")
    axes = fig.subplots(1, len(engines), squeeze=False, sharey=True)[0]
    for ax, eid in zip(axes, engines, strict=False):
        g = tel[tel["engine_id"] == eid]
        g = g.iloc[:: max(1, len(g) // max_points)]
        t0 = g["t"].min()
        sns.scatterplot(x=g["t"] - t0, y=g[col] / 2**30, hue=g["phase"], s=4, linewidth=0, ax=ax,
                        legend=ax is axes[-1])
        ax.set_title(textwrap.fill(eid, 26), fontsize=8)
        ax.set_xlabel("time since launch (s)")
        ax.set_ylabel(label)
    save_page(pdf, fig)


def _plot_saturation(pdf: PdfPages, a: Analysis) -> None:
    sat = a.saturation
    if sat.empty:
        return
    cap = a.capacity.set_index("engine_id") if "ceiling_predicted" in a.capacity else None
    first = None if cap is None else cap.iloc[0]
    title = "Concurrency ceiling: requests preempt or queue only above the predicted ceiling"
    bad = sat[(sat["concurrency"] <= sat["predicted_ceiling"]) & ~sat["ran_together"].astype(bool)]
    if not bad.empty:
        title = f"Concurrency ceiling: {len(bad)} points preempted or queued at or below the predicted ceiling"
    fig = titled_page(title)
    ax1, ax2 = fig.subplots(1, 2)
    sns.lineplot(data=sat, x="concurrency", y="peak_running", hue="engine_id", marker="o", ax=ax1)
    lim = sat["concurrency"].max()
    ax1.plot([0, lim], [0, lim], ls=":", color="grey", label="all requests running")
    if first is not None:
        ax1.axvline(first["ceiling_predicted"], color="black", ls="--", label="predicted ceiling")
        ax1.axvline(first["ceiling_vllm_arithmetic"], color="red", ls=":", label="vLLM's arithmetic")
    ax1.set_xlabel("requests submitted together")
    ax1.set_ylabel("peak requests running (count)")
    ax1.legend(fontsize=7)
    sns.barplot(data=sat, x="concurrency", y="preemptions", hue="engine_id", ax=ax2)
    ax2.set_xlabel("requests submitted together")
    ax2.set_ylabel("preemptions (count)")
    ax2.legend(fontsize=7)
    save_page(pdf, fig)
    fig, ax = plt.subplots(figsize=PAGE)
    sns.lineplot(data=sat, x="concurrency", y="output_tokens_per_s", hue="engine_id", marker="o", ax=ax)
    if first is not None:
        ax.axvline(first["ceiling_predicted"], color="black", ls="--", label="predicted ceiling")
    verdict = a.claims.set_index("claim")["verdict"].get("Throughput stops rising once the KV pool is full", "")
    trend = "stays flat" if verdict == "holds" else "still changes"
    fig.suptitle(f"Throughput vs submitted requests: past the full KV pool it {trend}", fontsize=13,
                 fontweight="bold", x=0.02, ha="left")
    ax.set_xlabel("requests submitted together")
    ax.set_ylabel("output tokens/s (engine step time only)")
    save_page(pdf, fig)


def _plot_decode(pdf: PdfPages, a: Analysis) -> None:
    dec = a.decode
    if dec.empty:
        return
    f = a.fit
    title = "Decode step time vs context per batch, with roofline and fit"
    if f is not None:
        flops = f" + FLOPs / {f.effective_flops / 1e9:,.0f} GFLOP/s" if f.effective_flops else ""
        title = (f"Decode{f', {f.regime.kind}-dominated' if f.regime else ''}: step time = "
                 f"{fms(f.step_overhead_s)} + bytes / {fbw(f.effective_bandwidth_Bps)}{flops} (R² {f.r2:.2f})")
    fig = titled_page(title)
    ax = fig.add_subplot(1, 1, 1)
    palette = sns.color_palette("viridis", dec["concurrency"].nunique())
    for color, (c, g) in zip(palette, dec.groupby("concurrency"), strict=False):
        g = g.sort_values("mean_context")
        ax.errorbar(g["mean_context"], 1e3 * g["decode_step_s"], yerr=1e3 * g["decode_step_spread_s"].fillna(0) / 2,
                    fmt="o", color=color, label=f"measured, batch {c}")
        if "fitted_s" in g:
            ax.plot(g["mean_context"], 1e3 * g["fitted_s"], "-", color=color, alpha=0.7)
        for col, ls in (("roofline_spec_s", "--"), ("roofline_probe_s", ":")):
            if col in g and g[col].notna().any():
                ax.plot(g["mean_context"], 1e3 * g[col], ls, color=color, alpha=0.6)
        t_star = g["crossover_context"].iloc[0] if "crossover_context" in g else None
        if t_star and t_star <= dec["mean_context"].max() * 1.05:
            ax.axvline(t_star, color=color, ls="-.", alpha=0.5)
    ax.set_xlabel("mean context during decode (tokens)")
    ax.set_ylabel("decode step time (ms)")
    ax.set_yscale("log")
    ax.plot([], [], "k-", label="fit (overhead + bytes/BW_eff)")
    ax.plot([], [], "k--", label="roofline, spec sheet")
    ax.plot([], [], "k:", label="roofline, probed ceilings")
    ax.plot([], [], "k-.", label="predicted crossover t*")
    ax.legend(fontsize=7, ncol=2)
    save_page(pdf, fig)


def _plot_bandwidth(pdf: PdfPages, a: Analysis) -> None:
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
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(dec))
    ax.scatter(x, dec["model_implied_Bps"] / 1e9, label="model bytes ÷ measured step", marker="o")
    if dec["gpm_implied_Bps"].notna().any():
        ax.scatter(x, dec["gpm_implied_Bps"] / 1e9, label="NVML GPM DRAM % × spec", marker="s")
    for val, label, ls in ((ce.spec_bandwidth_Bps, "spec peak", "--"), (ce.probe_bandwidth_Bps, "probed copy", ":")):
        if val:
            ax.axhline(val / 1e9, ls=ls, color="black", label=label)
    ax.set_xticks(x, [f"b{r.concurrency}·{r.mean_context:.0f}" for r in dec.itertuples()], rotation=90, fontsize=6)
    ax.set_xlabel("decode point (batch · mean context)")
    ax.set_ylabel("bandwidth (GB/s)")
    ax.legend(fontsize=8)
    save_page(pdf, fig)


def _plot_settings(pdf: PdfPages, a: Analysis) -> None:
    dec = a.decode
    if dec.empty:
        return
    fig = titled_page("Block size and KV dtype: effect on decode step time and capacity")
    ax1, ax2 = fig.subplots(1, 2)
    d = dec.assign(setting=dec["kv_cache_dtype"].astype(str) + " / block " + dec["block_size"].astype(str))
    sns.barplot(data=d, x="concurrency", y=d["decode_step_s"] * 1e3, hue="setting", ax=ax1, errorbar=None)
    ax1.set_ylabel("median decode step time over contexts (ms)")
    ax1.set_xlabel("batch (sequences)")
    cap = a.capacity
    if not cap.empty:
        c = cap.assign(setting=cap["kv_cache_dtype"].astype(str) + " / block " + cap["block_size"].astype(str))
        sns.barplot(data=c, x="max_model_len", y="max_concurrency_vllm", hue="setting", ax=ax2, errorbar=None)
        ax2.set_ylabel("max concurrency at max_model_len (sequences)")
        ax2.set_xlabel("max_model_len (tokens)")
    save_page(pdf, fig)


# --- serve mode (pages drawn only when the run has serve points) -----------------------------------------

def _wrap(title: str) -> str:
    """A finding that fits the page's width: broken onto a second line where it is long."""
    return textwrap.fill(title, 100)


def _plot_served_vs_offline(pdf: PdfPages, a: Analysis) -> None:
    """Served TPOT and ITL against the offline decode step at the same batch and context, with the fitted line."""
    s = a.serve
    if s is None or s.matched.empty:
        return
    m, f = s.matched, s.fit
    fig = titled_page(_wrap(overhead_finding(s) or "Served vs offline"))
    ax = fig.add_subplot(1, 1, 1)
    x = 1e3 * m["offline_step_s"]
    ax.scatter(x, 1e3 * m["served_tpot_s"], marker="o", label="served TPOT (median)")
    if m["served_itl_s"].notna().any():
        ax.scatter(x, 1e3 * m["served_itl_s"], marker="s", label="served ITL (median)")
    for xi, yi, c in zip(x, 1e3 * m["served_tpot_s"], m["concurrency"], strict=True):
        ax.annotate(f"c{c}", (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ys = 1e3 * m[["served_tpot_s", "served_itl_s"]]
    lo = 0.9 * float(min(x.min(), ys.min().min()))
    hi = 1.1 * float(max(x.max(), ys.max().max()))
    ax.plot([lo, hi], [lo, hi], ":", color="grey", label="served = offline (no overhead)")
    if f is not None and f.slope is not None:
        ax.plot([lo, hi], [f.slope * lo + 1e3 * f.intercept_s, f.slope * hi + 1e3 * f.intercept_s], "-",
                color="black", label=f"fit: {f.slope:.3f} × offline {'−' if f.intercept_s < 0 else '+'} "
                      f"{abs(1e3 * f.intercept_s):.3f} ms (R² {f.r2:.3f})")
    ax.set_title(f.sentence if f is not None else "", fontsize=8)
    ax.set_xlabel("offline decode step, same batch and lengths (ms)")
    ax.set_ylabel("served time per output token (ms)")
    ax.legend(fontsize=8)
    save_page(pdf, fig)


def _served_vs_offline_markdown(a: Analysis) -> list[str]:
    s = a.serve
    if s is None:
        return []
    return [f"## Served vs offline\n\n{overhead_finding(s) or 'No serve point matches an offline decode point.'}."
            + (f" {s.fit.sentence}." if s.fit else "") + f"\n\n{s.tokenizer_sentence}\n"]


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


def _plot_serve_load(pdf: PdfPages, a: Analysis) -> None:
    """TTFT and TPOT percentiles vs concurrency (closed loop) and vs request rate (open loop)."""
    s = a.serve
    if s is None:
        return
    panels = [(df, x, label) for df, x, label in ((s.closed, "concurrency", "requests in flight (closed loop)"),
                                                  (s.open, "request_rate", "request rate (req/s, open loop)"))
              if not df.empty]
    if not panels:
        return
    fig = titled_page(_wrap(_load_finding(s)))
    axes = fig.subplots(len(panels), 2, squeeze=False)
    for row, (df, x, label) in zip(axes, panels, strict=True):
        groups = df.groupby(["engine_id", "prompt_len", "output_len", "prefix_len"], sort=True)
        engines = df["engine_id"].nunique()
        palette = sns.color_palette("tab10", groups.ngroups)
        for ax, metric, name in ((row[0], "ttft", "TTFT"), (row[1], "tpot", "TPOT")):
            for color, ((eid, p, o, pre), g) in zip(palette, groups, strict=False):
                g = g.sort_values(x)
                tag = f"p{p}/o{o}" + (f"/prefix {pre}" if pre else "") + (f" {eid}" if engines > 1 else "")
                for q, ls in (("p50", "-"), ("p90", "--"), ("p99", ":")):
                    ax.plot(g[x], 1e3 * g[f"{metric}_{q}_s"], ls, marker="o", ms=3, color=color,
                            label=f"{q} {tag}" if q == "p50" or groups.ngroups == 1 else None)
            ax.set_xlabel(label)
            ax.set_ylabel(f"{name} (ms)")
            ax.set_title(f"{name} p50 (solid), p90 (dashed), p99 (dotted)", fontsize=8)
            ax.legend(fontsize=6)
    save_page(pdf, fig)


def _serve_load_markdown(a: Analysis) -> list[str]:
    return [f"## Serve latency vs load\n\n{_load_finding(a.serve)}.\n"] if a.serve is not None else []


def _frontier_finding(s: ServeAnalysis) -> str:
    f = s.frontier.dropna(subset=["latency_s", "output_tokens_per_s"]) if not s.frontier.empty else s.frontier
    if f.empty:
        return "Throughput–latency frontier: no point with both throughput and latency"
    best = f.loc[f["output_tokens_per_s"].idxmax()]
    return (f"Throughput–latency frontier: {int(f['pareto'].sum())} of {len(f)} points Pareto-efficient; most "
            f"{best['output_tokens_per_s']:,.0f} tokens/s at {level_text(best)} (TPOT p50 {fms(best['latency_s'])})")


def _plot_frontier(pdf: PdfPages, a: Analysis) -> None:
    s = a.serve
    if s is None or s.frontier.empty:
        return
    f = s.frontier.dropna(subset=["latency_s", "output_tokens_per_s"])
    if f.empty:
        return
    fig = titled_page(_wrap(_frontier_finding(s)))
    ax = fig.add_subplot(1, 1, 1)
    other = f[~f["pareto"].astype(bool)]
    best = f[f["pareto"].astype(bool)].sort_values("latency_s")
    ax.scatter(1e3 * other["latency_s"], other["output_tokens_per_s"], color="grey", label="dominated")
    for (p, o, pre), g in best.groupby(["prompt_len", "output_len", "prefix_len"]):
        ax.plot(1e3 * g["latency_s"], g["output_tokens_per_s"], "-o",
                label=f"Pareto-efficient, p{p}/o{o}" + (f"/prefix {pre}" if pre else ""))
    for r in f.to_dict("records"):
        ax.annotate(level_text(r), (1e3 * r["latency_s"], r["output_tokens_per_s"]), textcoords="offset points",
                    xytext=(4, 4), fontsize=7)
    ax.set_xlabel("TPOT p50 (ms)")
    ax.set_ylabel("output tokens/s (served)")
    ax.legend(fontsize=8)
    save_page(pdf, fig)


def _frontier_markdown(a: Analysis) -> list[str]:
    return [f"## Serve frontier\n\n{_frontier_finding(a.serve)}.\n"] if a.serve is not None else []


def _plot_serve_capacity(pdf: PdfPages, a: Analysis) -> None:
    """Peak running and waiting requests per closed-loop level from the server's /metrics, with the prediction."""
    s = a.serve
    if s is None:
        return
    d = s.serve[(s.serve["loop"] == "closed") & (s.serve["prefix_len"] == 0)]
    if d.empty or "tel_server_peak_requests_running" not in d or d["tel_server_peak_requests_running"].isna().all():
        return
    fig = titled_page(_wrap(ceiling_finding(s) or "Served ceiling"))
    ax = fig.add_subplot(1, 1, 1)
    for (eid, p, o), g in d.groupby(["engine_id", "prompt_len", "output_len"]):
        g = g.sort_values("concurrency")
        tag = f"p{p}/o{o}" + (f" {eid[:24]}" if d["engine_id"].nunique() > 1 else "")
        ax.plot(g["concurrency"], g["tel_server_peak_requests_running"], "-o", label=f"peak running, {tag}")
        if "tel_server_peak_requests_waiting" in g:
            ax.plot(g["concurrency"], g["tel_server_peak_requests_waiting"], "--s", label=f"peak waiting, {tag}")
    lim = float(d["concurrency"].max())
    ax.plot([0, lim], [0, lim], ":", color="grey", label="every request running")
    for r in s.ceiling.to_dict("records"):
        pred = r.get("predicted_ceiling")
        if pred is None or pd.isna(pred):
            continue
        label = f"predicted ceiling {pred:,.0f} at {r['prompt_len'] + r['output_len']} tokens"
        if pred <= 2 * lim:
            ax.axhline(pred, color="black", ls="-.", label=label)
        else:  # far above every level run: named, not drawn (it would flatten the measured lines)
            ax.plot([], [], " ", label=label + " (above the levels run)")
    ax.set_xlabel("requests in flight (closed-loop level)")
    ax.set_ylabel("requests (count, the server's /metrics peak)")
    ax.legend(fontsize=7)
    save_page(pdf, fig)


def _serve_capacity_markdown(a: Analysis) -> list[str]:
    if a.serve is None:
        return []
    return [f"## Serve capacity\n\n{ceiling_finding(a.serve) or 'No served ceiling measured or predicted'}.\n"]


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


def _title_page(pdf: PdfPages, a: Analysis) -> None:
    text_page(pdf, f"kvprof report — {a.res.manifest.get('name')}",
              [("Setup", setup_lines(a)), ("Headline", headline(a))], _banner(a))


def _title_markdown(a: Analysis) -> list[str]:
    parts = [f"# kvprof report — {a.res.manifest.get('name')}\n"]
    if banner := _banner(a):
        parts.append(f"**{banner}**\n")
    parts.append("## Setup\n\n" + "\n".join(f"- {x}" for x in setup_lines(a)) + "\n")
    parts.append("## Headline\n\n" + "\n".join(f"- {x}" for x in headline(a)) + "\n")
    return parts


# --- the page registry ---------------------------------------------------------------------------

def _no_markdown(a: Analysis) -> list[str]:
    return []


def _fit_page(pdf: PdfPages, a: Analysis) -> None:
    """The decode fit: its title and first column say whether the sweep is overhead-, memory- or
    compute-dominated before the fitted bandwidth; the regime in words below the table."""
    if "fit" in a.tables:
        table_page(pdf, a.tables["fit"])


def _fit_markdown(a: Analysis) -> list[str]:
    """The fit in summary.md: the regime sentence first, then the fitted numbers."""
    t = a.tables.get("fit")
    if t is None:
        return []
    regime = a.fit.regime.sentence if a.fit is not None and a.fit.regime else ""
    body = t.frame.to_markdown(index=False)
    return [f"### {t.title}\n\n" + (f"{regime}\n\n" if regime else "") + f"{body}\n"]


@dataclass(frozen=True)
class ReportPage:
    """One entry of the report. ``render`` draws its page(s) into report.pdf, or nothing when the run has no
    data for it; ``markdown`` returns its sections of summary.md (none for a figure)."""

    name: str
    render: Callable[[PdfPages, Analysis], None]
    markdown: Callable[[Analysis], list[str]] = _no_markdown


def _table(key: str, *, in_pdf_when_empty: bool = True) -> ReportPage:
    """The page of the analysis table ``a.tables[key]``; nothing where the analysis built no such table."""

    def render(pdf: PdfPages, a: Analysis) -> None:
        table = a.tables.get(key)
        if table is not None and (in_pdf_when_empty or not table.frame.empty):
            table_page(pdf, table)

    def markdown(a: Analysis) -> list[str]:
        return [a.tables[key].markdown()] if key in a.tables else []

    return ReportPage(key, render, markdown)


# The report, in order: build_report walks this list for report.pdf and for summary.md, so a new page is
# one function registered here.
PAGES: list[ReportPage] = [
    ReportPage("title", _title_page, _title_markdown),
    _table("capacity"),
    ReportPage("capacity plot", _plot_capacity),
    _table("budget"),
    ReportPage("memory plot", _plot_memory),
    ReportPage("memory timeline", _plot_timeline),
    _table("ceiling"),
    ReportPage("saturation plots", _plot_saturation),
    _table("rounding"),
    ReportPage("decode plot", _plot_decode),
    ReportPage("fit", _fit_page, _fit_markdown),
    _table("decode"),
    _table("crossover"),
    ReportPage("bandwidth plot", _plot_bandwidth),
    ReportPage("settings plot", _plot_settings),
    _table("kv_dtype"),
    # serve mode: each page only where the run has serve points
    ReportPage("served vs offline", _plot_served_vs_offline, _served_vs_offline_markdown),
    _table("serve_offline"),
    ReportPage("serve latency vs load", _plot_serve_load, _serve_load_markdown),
    _table("serve_load"),
    ReportPage("serve frontier", _plot_frontier, _frontier_markdown),
    _table("serve_frontier"),
    ReportPage("serve capacity", _plot_serve_capacity, _serve_capacity_markdown),
    _table("serve_ceiling"),
    _table("serve_goodput"),
    _table("serve_prefix"),
    _table("claims"),
    _table("divergences"),
    ReportPage("environment", lambda pdf, a: table_page(pdf, _environment(a)), lambda a: [_environment(a).markdown()]),
    _table("failed", in_pdf_when_empty=False),  # the PDF lists failures only when there are some
]


# --- entry point ---------------------------------------------------------------------------------

def build_report(results_dir: str | Path, pdf_path: str | Path | None = None,
                 out_dir: str | Path | None = None) -> dict[str, Path]:
    """Write report.pdf, summary.md (both from PAGES), results.parquet and calibration.json into ``out_dir``
    (default: the results directory; ``pdf_path`` moves the PDF); return their paths.

    Each file is written beside its place and renamed into it, so an interrupted or failed report leaves
    every earlier file whole. The three small files are prepared before the PDF is drawn and written
    after it, so they and the PDF come from one analysis. A calibration.json there from an earlier
    report is removed when this analysis has no decode fit (returned as ``calibration_removed``): a
    stale one would still feed ``kvprof plan --calibration``.
    """
    res = load(results_dir)
    a = analyse(res)
    out = Path(out_dir) if out_dir is not None else Path(results_dir)
    pdf_path = Path(pdf_path) if pdf_path else out / "report.pdf"
    summary = "\n".join(part for page in PAGES for part in page.markdown(a)).encode()
    buf = io.BytesIO()
    results_table(a).to_parquet(buf, index=False)
    cal = (json.dumps(calibration(a), indent=2) + "\n").encode() if a.fit is not None else None
    with atomic_pdf(pdf_path) as pdf:
        for page in PAGES:
            page.render(pdf, a)
        info = pdf.infodict()
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
