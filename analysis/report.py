"""report.pdf, summary.md, results.parquet and calibration.json from a results directory.

Every table is built once as strings (``Table``) and written both into the PDF
(matplotlib) and into summary.md (tabulate), so the two always say the same.
Plot titles state the finding; axes carry units.
"""

from __future__ import annotations

import datetime as dt
import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_pdf import PdfPages

from analysis import claims as claims_mod
from analysis import theory_vs_measured as tvm
from analysis.fit import DecodeFit, calibration_dict
from analysis.load import Results, load
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


def _fmt(df: pd.DataFrame, spec: dict[str, tuple[str, Any]]) -> pd.DataFrame:
    """Select and format columns: {source column: (header, formatter)}."""
    out = pd.DataFrame()
    for col, (header, f) in spec.items():
        out[header] = df[col].map(f) if col in df else "—"
    return out


# --- the analysis bundle ----------------------------------------------------------------------

@dataclass
class Analysis:
    res: Results
    ceilings: tvm.Ceilings
    capacity: pd.DataFrame
    decode: pd.DataFrame
    fit: DecodeFit | None
    crossover: pd.DataFrame
    rounding: pd.DataFrame
    saturation: pd.DataFrame
    claims: pd.DataFrame
    divergences: pd.DataFrame
    tables: dict[str, Table] = field(default_factory=dict)


def analyse(res: Results) -> Analysis:
    ce = tvm.Ceilings.of(res)
    cap = tvm.capacity_table(res)
    dec = tvm.decode_table(res, ce)
    f = tvm.fit(dec, ce)
    dec = tvm.with_fit(dec, f)
    rnd = tvm.rounding_table(res)
    sat = tvm.saturation_table(res)
    a = Analysis(res=res, ceilings=ce, capacity=cap, decode=dec, fit=f, crossover=tvm.measured_crossover(dec, f),
                 rounding=rnd, saturation=sat, claims=claims_mod.check_all(cap, dec, rnd, sat, f),
                 divergences=tvm.divergences(cap, dec, rnd))
    a.tables = build_tables(a)
    return a


def build_tables(a: Analysis) -> dict[str, Table]:
    t: dict[str, Table] = {}
    t["capacity"] = Table("KV capacity: the allocator model vs vLLM", _fmt(a.capacity, {
        "engine_id": ("engine", str), "block_size": ("block", fnum), "max_model_len": ("max len", fnum),
        "kv_cache_dtype": ("kv dtype", str), "kv_budget_bytes": ("KV budget", fbytes),
        "num_blocks_predicted": ("blocks (model)", fnum), "num_blocks_vllm": ("blocks (vLLM)", fnum),
        "blocks_error": ("error", fnum), "kv_tokens_predicted": ("tokens (model)", fnum),
        "kv_tokens_vllm": ("tokens (vLLM)", fnum), "max_concurrency_vllm": ("max conc. (vLLM)", fnum),
        "ideal_max_concurrency": ("ideal conc.", fnum)}),
        note="Predicted from the KV budget vLLM used (kv_cache_memory_bytes exactly, or the logged "
             "'Available KV cache memory' rounded to 0.01 GiB); 'ideal' is the textbook budget ÷ bytes per sequence.")
    if "predicted_kv_budget_bytes" in a.capacity:
        t["budget"] = Table("KV budget on the GPU: memory × utilisation − weights − reserve vs vLLM", _fmt(
            a.capacity, {"engine_id": ("engine", str), "predicted_kv_budget_bytes": ("predicted", fbytes),
                         "kv_budget_bytes": ("vLLM", fbytes), "kv_budget_rel_error": ("error", fpct),
                         "weights_bytes_predicted": ("weights (model)", fbytes),
                         "predicted_reserve_bytes": ("reserve (heuristic)", fbytes),
                         "vllm_model_loading_bytes": ("weights (vLLM)", fbytes),
                         "vllm_peak_activation_bytes": ("activation peak (vLLM)", fbytes),
                         "vllm_non_torch_bytes": ("non-torch (vLLM)", fbytes),
                         "vllm_cuda_graph_bytes": ("CUDA graphs (vLLM)", fbytes)}))
    if "ceiling_predicted" in a.capacity:
        t["ceiling"] = Table("Batch ceiling at a fixed length: predicted vs the saturation phase", _fmt(
            a.capacity, {"engine_id": ("engine", str), "saturation_length": ("sequence length", fnum),
                         "ceiling_predicted": ("predicted", fnum),
                         "ceiling_vllm_arithmetic": ("vLLM's arithmetic", fnum),
                         "ceiling_measured_at_least": ("ran together up to", fnum),
                         "ceiling_measured_below": ("preempted/queued from", fnum)}),
            note="Predicted = (num_blocks − 1) // blocks per sequence, capped by max_num_seqs: vLLM keeps one "
                 "null block out of the pool, which its own 'maximum concurrency' arithmetic counts.")
    t["rounding"] = Table("Block rounding: KV blocks held by sequences of known length", _fmt(a.rounding, {
        "engine_id": ("engine", str), "block_size": ("block", fnum), "length": ("length", fnum),
        "requests": ("sequences", fnum), "blocks_predicted": ("n·ceil(L/block)", fnum),
        "used_blocks_measured": ("measured", lambda x: fnum(round(x, 6))),
        "waste_tokens_per_sequence": ("waste tokens/seq", lambda x: fnum(round(x, 6)))}))
    if a.fit is not None:
        f = a.fit
        t["fit"] = Table("Decode fit: step time = overhead + bytes / BW_eff" + (" + FLOPs / F_eff"
                                                                            if f.effective_flops else ""),
                         pd.DataFrame([{
                             "BW_eff": fbw(f.effective_bandwidth_Bps), "overhead": fms(f.step_overhead_s),
                             "F_eff": "—" if not f.effective_flops else f"{f.effective_flops / 1e12:,.2f} TFLOP/s",
                             "MBU vs spec": fpct(f.mbu_spec).lstrip("+") if f.mbu_spec else "—",
                             "MBU vs probe": fpct(f.mbu_probe).lstrip("+") if f.mbu_probe else "—",
                             "R²": f"{f.r2:.3f}", "points": fnum(f.n),
                             "LOO median |error|": fpct(f.loo_median_abs_rel_error).lstrip("+")}]))
    t["decode"] = Table("Decode: measured step time vs roofline and fit", _fmt(a.decode, {
        "engine_id": ("engine", str), "concurrency": ("batch", fnum), "mean_context": ("context", fnum),
        "decode_step_s": ("step (measured)", fms), "roofline_spec_s": ("roofline (spec)", fms),
        "roofline_probe_s": ("roofline (probe)", fms), "fitted_s": ("fitted", fms),
        "fitted_rel_error": ("fit error", fpct), "tpot_s": ("TPOT", fms),
        "model_implied_Bps": ("model bytes/s", fbw), "gpm_implied_Bps": ("GPM bytes/s", fbw)}))
    t["crossover"] = Table("Crossover: context where the KV read overtakes the weight read", _fmt(a.crossover, {
        "engine_id": ("engine", str), "concurrency": ("batch", fnum),
        "predicted_crossover": ("predicted t*", fnum), "measured_crossover": ("measured t*", fnum),
        "rel_error": ("error", fpct)}),
        note="Measured t* = (intercept − fitted overhead) / slope of step time vs context at that batch.")
    eff = tvm.kv_dtype_effect(a.decode)
    if not eff.empty:
        t["kv_dtype"] = Table("fp8 vs 16-bit KV cache: decode step time, predicted vs measured", _fmt(eff, {
            "max_model_len": ("max len", fnum), "concurrency": ("batch", fnum), "prompt_len": ("prompt", fnum),
            "bytes_ratio": ("bytes read fp8/16", lambda x: f"{x:.3f}"),
            "predicted_step_ratio": ("predicted step fp8/16", lambda x: f"{x:.3f}"),
            "measured_step_ratio": ("measured step fp8/16", lambda x: f"{x:.3f}"), "rel_error": ("error", fpct)}),
            note="Predicted with the fitted model (overhead + bytes/BW_eff), which counts fp8's smaller KV read; "
                 "capacity is on the claims page.")
    t["claims"] = Table("The seeds' claims against the data", _fmt(a.claims, {
        "claim": ("claim", str), "verdict": ("verdict", str), "error": ("error", fpct),
        "tolerance": ("tolerance", lambda x: fpct(x).lstrip("+")), "evidence": ("evidence", str)}))
    t["divergences"] = Table("Largest divergences between theory and measurement", _fmt(a.divergences.head(25), {
        "quantity": ("quantity", str), "where": ("where", str), "predicted": ("predicted", fnum),
        "measured": ("measured", fnum), "rel_error": ("error", fpct)}))
    failed = a.res.points[a.res.points["status"] != "ok"] if not a.res.points.empty else a.res.points
    t["failed"] = Table("Failed points", _fmt(failed, {
        "point_id": ("point", str), "status": ("status", str),
        "message": ("message", lambda m: textwrap.shorten(str(m), 90) if m is not None else "—")}))
    return t


# --- headline ----------------------------------------------------------------------------------

def headline(a: Analysis) -> list[str]:
    lines = []
    cap = a.capacity
    if not cap.empty and "blocks_error" in cap:
        exact = int((cap["blocks_error"].abs() <= cap["blocks_tolerance"]).sum())
        lines.append(f"KV capacity: the allocator model matches vLLM's block count on {exact}/{len(cap)} engines "
                     f"(largest error {fnum(cap['blocks_error'].abs().max())} blocks).")
    if "ceiling_predicted" in cap and cap["ceiling_predicted"].notna().any():
        r = cap.dropna(subset=["ceiling_predicted"]).iloc[0]
        lines.append(f"Batch ceiling at {fnum(r['saturation_length'])} tokens: "
                     f"predicted {fnum(r['ceiling_predicted'])}, "
                     f"ran together up to {fnum(r['ceiling_measured_at_least'])}, preempted/queued from "
                     f"{fnum(r['ceiling_measured_below'])}; vLLM's own arithmetic says "
                     f"{fnum(r['ceiling_vllm_arithmetic'])}.")
    if "kv_budget_rel_error" in cap and cap["kv_budget_rel_error"].notna().any():
        lines.append(f"KV budget on the GPU: heuristic reserve off by {fpct(cap['kv_budget_rel_error'].median())} "
                     f"(median over engines).")
    f = a.fit
    if f is not None:
        mbu = "; ".join(s for s in (f"MBU {100 * f.mbu_spec:.0f}% of spec" if f.mbu_spec else "",
                                    f"{100 * f.mbu_probe:.0f}% of the probed copy bandwidth" if f.mbu_probe else "")
                        if s)
        lines.append(f"Decode fit: effective bandwidth {fbw(f.effective_bandwidth_Bps)}"
                     f"{' (' + mbu + ')' if mbu else ''}, fixed overhead {fms(f.step_overhead_s)} per step, "
                     f"R² {f.r2:.3f}, leave-one-out median error {fpct(f.loo_median_abs_rel_error).lstrip('+')}"
                     + (f" — {f.note}." if f.note else "."))
    if not a.claims.empty:
        counts = a.claims["verdict"].value_counts()
        lines.append("Claims: " + ", ".join(f"{n} {v}" for v, n in counts.items()) + ".")
    if not a.divergences.empty:
        # The largest divergence of each kind of quantity, not three noisy points of one kind.
        top = a.divergences.dropna(subset=["rel_error"])
        top = top[top["rel_error"].abs() > 1e-9].drop_duplicates("quantity").head(3)
        for r in top.itertuples(index=False):
            lines.append(f"Divergence: {r.quantity} at {r.where}: predicted {fnum(r.predicted)}, "
                         f"measured {fnum(r.measured)} ({fpct(r.rel_error)}).")
    return lines


def setup_lines(a: Analysis) -> list[str]:
    m, e = a.res.manifest, a.res.engines
    first = e.iloc[0] if not e.empty else {}

    def get(k: str) -> Any:
        return first.get(k) if hasattr(first, "get") else None

    started = m.get("started_at")
    when = dt.datetime.fromtimestamp(started, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if started else "—"
    probe = a.res.probe or {}
    pts = a.res.points
    ok = int((pts["status"] == "ok").sum()) if not pts.empty else 0
    return [
        f"Sweep: {m.get('name')} ({when}, status {m.get('status')})",
        f"Model: {get('model')}  ·  KV dtypes: {', '.join(sorted(map(str, e['kv_cache_dtype'].dropna().unique())))}"
        if not e.empty else "Model: —",
        f"Device: {get('gpu_name') or get('device')}  ·  driver {get('driver') or '—'}  ·  host {m.get('host')}",
        f"vLLM {get('vllm_version')}  ·  torch {get('torch_version')}  ·  kvprof {m.get('kvprof_version')}",
        f"Engines: {len(e)}  ·  points: {ok} ok of {len(pts)}  ·  engine launches: {m.get('engine_launches')}",
        f"Ceilings: spec {fbw(a.ceilings.spec_bandwidth_Bps)}, probe copy {fbw(a.ceilings.probe_bandwidth_Bps)}, "
        f"probe bf16 matmul {fnum((a.ceilings.probe_flops or float('nan')) / 1e12)} TFLOP/s"
        + (f" ({probe.get('device')})" if probe else ""),
    ]


# --- pages -------------------------------------------------------------------------------------

def save_page(pdf: PdfPages, fig: plt.Figure, rect: tuple[float, float, float, float] = (0, 0, 1, 0.93)) -> None:
    """Lay out under the page title, add to the PDF, free the figure."""
    fig.tight_layout(rect=rect)
    pdf.savefig(fig)
    plt.close(fig)


def _page(title: str) -> plt.Figure:
    """A landscape page whose title states the finding."""
    fig = plt.figure(figsize=PAGE)
    fig.suptitle(title, fontsize=13, fontweight="bold", x=0.02, ha="left")
    return fig


def _table_page(pdf: PdfPages, table: Table, max_rows: int = 28) -> None:
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


def _text_page(pdf: PdfPages, title: str, blocks: list[tuple[str, list[str]]], banner: str | None = None) -> None:
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


def _plot_capacity(pdf: PdfPages, a: Analysis) -> None:
    cap = a.capacity
    if cap.empty or "num_blocks_predicted" not in cap:
        return
    exact = (cap["blocks_error"].abs() <= cap["blocks_tolerance"]).all()
    fig = _page("Capacity: vLLM's KV blocks " + ("equal the allocator model on every engine" if exact
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
    fig = _page("Memory: where the device memory goes — theory, vLLM's account, and what was measured")
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
    fig = _page(f"Memory timeline: {label.split(' (')[0]} per engine, by phase")
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
    fig = _page(title)
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
        title = (f"Decode: step time = {fms(f.step_overhead_s)} + bytes / {fbw(f.effective_bandwidth_Bps)} "
                 f"(R² {f.r2:.2f})")
    fig = _page(title)
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
    fig = _page(title)
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
    fig = _page("Block size and KV dtype: effect on decode step time and capacity")
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
                 ("telemetry unavailable", "; ".join(sorted(set(e["telemetry_unavailable"].dropna()))) or "—")]
    pts = a.res.points
    failed = 0 if pts.empty else int((pts["status"] != "ok").sum())
    rows.append(("failed points", f"{failed} (listed on the next page)" if failed else "none"))
    if "trust_remote_code" in (a.res.spec_text or ""):
        rows.append(("trust_remote_code", "set by the spec"))
    return Table("Environment", pd.DataFrame([{"item": k, "value": textwrap.shorten(str(v), 150)}
                                              for k, v in rows]))


# --- entry point ---------------------------------------------------------------------------------

def build_report(results_dir: str | Path, pdf_path: str | Path | None = None) -> dict[str, Path]:
    """Write report.pdf, summary.md, results.parquet and calibration.json; return their paths."""
    res = load(results_dir)
    a = analyse(res)
    root = Path(results_dir)
    pdf_path = Path(pdf_path) if pdf_path else root / "report.pdf"
    banner = "SYNTHETIC DATA — generated by a test helper with injected parameters, not measured" \
        if res.synthetic else None
    env = _environment(a)
    with PdfPages(pdf_path) as pdf:
        _text_page(pdf, f"kvprof report — {res.manifest.get('name')}",
                   [("Setup", setup_lines(a)), ("Headline", headline(a))], banner)
        _table_page(pdf, a.tables["capacity"])
        _plot_capacity(pdf, a)
        if "budget" in a.tables:
            _table_page(pdf, a.tables["budget"])
        _plot_memory(pdf, a)
        _plot_timeline(pdf, a)
        if "ceiling" in a.tables:
            _table_page(pdf, a.tables["ceiling"])
        _plot_saturation(pdf, a)
        _table_page(pdf, a.tables["rounding"])
        _plot_decode(pdf, a)
        if "fit" in a.tables:
            _table_page(pdf, a.tables["fit"])
        _table_page(pdf, a.tables["decode"])
        _table_page(pdf, a.tables["crossover"])
        _plot_bandwidth(pdf, a)
        _plot_settings(pdf, a)
        if "kv_dtype" in a.tables:
            _table_page(pdf, a.tables["kv_dtype"])
        _table_page(pdf, a.tables["claims"])
        _table_page(pdf, a.tables["divergences"])
        _table_page(pdf, env)
        if not a.tables["failed"].frame.empty:
            _table_page(pdf, a.tables["failed"])
        info = pdf.infodict()
        info["Title"] = f"kvprof report {res.manifest.get('name')}"
        info["Subject"] = "KV-cache theory vs vLLM measurements"
    summary = root / "summary.md"
    parts = [f"# kvprof report — {res.manifest.get('name')}\n"]
    if banner:
        parts.append(f"**{banner}**\n")
    parts.append("## Setup\n\n" + "\n".join(f"- {x}" for x in setup_lines(a)) + "\n")
    parts.append("## Headline\n\n" + "\n".join(f"- {x}" for x in headline(a)) + "\n")
    for key in ("capacity", "budget", "ceiling", "rounding", "fit", "decode", "crossover", "kv_dtype", "claims",
                "divergences"):
        if key in a.tables:
            parts.append(a.tables[key].markdown())
    parts += [env.markdown(), a.tables["failed"].markdown()]
    summary.write_text("\n".join(parts))
    out = {"pdf": pdf_path, "summary": summary, "results": root / "results.parquet"}
    _results_table(a).to_parquet(out["results"], index=False)
    if a.fit is not None:
        out["calibration"] = root / "calibration.json"
        out["calibration"].write_text(json.dumps(calibration(a), indent=2) + "\n")
    return out


def calibration(a: Analysis) -> dict[str, Any]:
    e = a.res.engines.iloc[0]
    cap = a.capacity
    reserve = None
    if "predicted_kv_budget_bytes" in cap and cap["kv_budget_bytes"].notna().any():
        # Measured reserve: what the heuristic predicted plus how far the real budget fell short of it.
        r = cap.dropna(subset=["predicted_kv_budget_bytes"]).iloc[0]
        reserve = int(r["predicted_reserve_bytes"] + r["predicted_kv_budget_bytes"] - r["kv_budget_bytes"])
    return calibration_dict(a.fit, device=e.get("gpu_name") or e.get("device"), vllm_version=e.get("vllm_version"),
                            model=e.get("model"), kv_cache_dtype=e.get("kv_cache_dtype"), reserve_bytes=reserve,
                            source=f"kvprof fit of {a.res.root.name} ({a.fit.n} decode points)")


def _results_table(a: Analysis) -> pd.DataFrame:
    """One tidy row per point: the record's measurements joined with the theory columns."""
    pts = a.res.points.copy()
    if not a.decode.empty:
        theory = [c for c in a.decode.columns if c not in pts.columns or c == "point_id"]
        pts = pts.merge(a.decode[theory], on="point_id", how="left")
    for col in pts.columns:  # parquet needs one type per column
        if pts[col].dtype == object:
            pts[col] = pts[col].map(lambda v: v if v is None or isinstance(v, str) else str(v))
    return pts
