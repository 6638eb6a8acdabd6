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
from analysis.pdf_pages import PAGE, Table, atomic_pdf, fbw, fms, save_page, table_page, text_page, titled_page
from analysis.pipeline import Analysis, analyse, calibration, headline, results_table, setup_lines
from analysis.results_schema import atomic_write_bytes

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
    gpu = tel["device"] != "host"
    col, label = (("mem_used_bytes", "device memory used (GiB, NVML)") if tel.loc[gpu, "mem_used_bytes"].notna().any()
                  else ("rss_bytes", "engine process-tree RSS (GiB)"))
    tel = tel[gpu] if col == "mem_used_bytes" else tel[~gpu]
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
