"""The single-run analysis pipeline: a loaded results directory → ``Analysis`` (theory vs measured tables,
the decode fit, claims, divergences) with its formatted tables, headline and setup lines, calibration and results table.

Rendering lives elsewhere: analysis.report writes these into report.pdf and summary.md.
"""

from __future__ import annotations

import datetime as dt
import textwrap
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from analysis import claims as claims_mod
from analysis import serve_analysis
from analysis import theory_vs_measured as tvm
from analysis.fit import DecodeFit, calibration_dict
from analysis.load import Results
from analysis.pdf_pages import Table, fbw, fbytes, fms, fnum, format_columns, fpct

# --- the analysis bundle ----------------------------------------------------------------------

@dataclass
class Analysis:
    """One run analysed: every theory-vs-measured table, the fit, the claims, and their formatted tables."""

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
    serve: serve_analysis.ServeAnalysis | None = None  # None: the run has no serve point that ran


def analyse(res: Results) -> Analysis:
    """Set a loaded run's measurements beside the analytic model: capacity, decode (with the fit),
    crossover, block rounding, saturation, the seeds' claims and the largest divergences."""
    ce = tvm.Ceilings.of(res)
    cap = tvm.capacity_table(res)
    dec = tvm.decode_table(res, ce)
    f = tvm.fit(dec, ce)
    dec = tvm.with_fit(dec, f)
    rnd = tvm.rounding_table(res)
    sat = tvm.saturation_table(res)
    a = Analysis(res=res, ceilings=ce, capacity=cap, decode=dec, fit=f, crossover=tvm.measured_crossover(dec, f),
                 rounding=rnd, saturation=sat,
                 claims=claims_mod.check_all(cap, dec, rnd, sat, f, engines=res.engines,
                                             dropped=res.manifest.get("dropped")),
                 divergences=tvm.divergences(cap, dec, rnd), serve=serve_analysis.analyse_serve(res))
    a.tables = build_tables(a)
    return a


def build_tables(a: Analysis) -> dict[str, Table]:
    """The report's tables as formatted strings, built once for the PDF and summary.md alike."""
    t: dict[str, Table] = {}
    t["capacity"] = Table("KV capacity: the allocator model vs vLLM", format_columns(a.capacity, {
        "engine_id": ("engine", str), "block_size": ("block", fnum), "max_model_len": ("max len", fnum),
        "kv_cache_dtype": ("kv dtype", str), "kv_budget_bytes": ("KV budget", fbytes),
        "num_blocks_predicted": ("blocks (model)", fnum), "num_blocks_vllm": ("blocks (vLLM)", fnum),
        "blocks_error": ("error", fnum), "kv_tokens_predicted": ("tokens (model)", fnum),
        "kv_tokens_vllm": ("tokens (vLLM)", fnum), "max_concurrency_vllm": ("max conc. (vLLM)", fnum),
        "ideal_max_concurrency": ("ideal conc.", fnum)}),
        note="Predicted from the KV budget vLLM used (kv_cache_memory_bytes exactly, or the logged "
             "'Available KV cache memory' rounded to 0.01 GiB); 'ideal' is the textbook budget ÷ bytes per sequence.")
    if "predicted_kv_budget_bytes" in a.capacity:
        t["budget"] = Table("KV budget on the GPU: memory × utilisation − weights − reserve vs vLLM", format_columns(
            a.capacity, {"engine_id": ("engine", str), "predicted_kv_budget_bytes": ("predicted", fbytes),
                         "kv_budget_bytes": ("vLLM", fbytes), "kv_budget_rel_error": ("error", fpct),
                         "weights_bytes_predicted": ("weights (model)", fbytes),
                         "predicted_reserve_bytes": ("reserve (heuristic)", fbytes),
                         "vllm_model_loading_bytes": ("weights (vLLM)", fbytes),
                         "vllm_peak_activation_bytes": ("activation peak (vLLM)", fbytes),
                         "vllm_non_torch_bytes": ("non-torch (vLLM)", fbytes),
                         "vllm_cuda_graph_bytes": ("CUDA graphs (vLLM)", fbytes)}))
    if "ceiling_predicted" in a.capacity:
        t["ceiling"] = Table("Batch ceiling at a fixed length: predicted vs the saturation phase", format_columns(
            a.capacity, {"engine_id": ("engine", str), "saturation_length": ("sequence length", fnum),
                         "ceiling_predicted": ("predicted", fnum),
                         "ceiling_vllm_arithmetic": ("vLLM's arithmetic", fnum),
                         "ceiling_measured_at_least": ("ran together up to", fnum),
                         "ceiling_measured_below": ("preempted/queued from", fnum)}),
            note="Predicted = (num_blocks − 1) // blocks per sequence, capped by max_num_seqs: vLLM keeps one "
                 "null block out of the pool, which its own 'maximum concurrency' arithmetic counts.")
    t["rounding"] = Table("Block rounding: KV blocks held by sequences of known length", format_columns(a.rounding, {
        "engine_id": ("engine", str), "block_size": ("block", fnum), "length": ("length", fnum),
        "requests": ("sequences", fnum), "blocks_predicted": ("n·ceil(L/block)", fnum),
        "used_blocks_measured": ("measured", lambda x: fnum(round(x, 6))),
        "waste_tokens_per_sequence": ("waste tokens/seq", lambda x: fnum(round(x, 6)))}))
    if a.fit is not None:
        f = a.fit
        r = f.regime
        t["fit"] = Table("Decode fit" + (f", {r.kind}-dominated" if r else "")
                         + ": step time = overhead + bytes / BW_eff"
                         + (" + FLOPs / F_eff" if f.effective_flops else ""),
                         pd.DataFrame([{
                             "regime": f"{r.kind}-dominated" if r else "—",
                             "overhead share": fpct(r.overhead_share).lstrip("+") if r else "—",
                             "BW_eff": fbw(f.effective_bandwidth_Bps), "overhead": fms(f.step_overhead_s),
                             "F_eff": "—" if not f.effective_flops else f"{f.effective_flops / 1e12:,.2f} TFLOP/s",
                             "MBU vs spec": fpct(f.mbu_spec).lstrip("+") if f.mbu_spec else "—",
                             "MBU vs probe": fpct(f.mbu_probe).lstrip("+") if f.mbu_probe else "—",
                             "R²": f"{f.r2:.3f}", "points": fnum(f.n),
                             "LOO median |error|": fpct(f.loo_median_abs_rel_error).lstrip("+")}]),
                         note=r.sentence if r else "")
    t["decode"] = Table("Decode: measured step time vs roofline and fit", format_columns(a.decode, {
        "engine_id": ("engine", str), "concurrency": ("batch", fnum), "mean_context": ("context", fnum),
        "decode_step_s": ("step (measured)", fms), "roofline_spec_s": ("roofline (spec)", fms),
        "roofline_probe_s": ("roofline (probe)", fms), "fitted_s": ("fitted", fms),
        "fitted_rel_error": ("fit error", fpct), "tpot_s": ("TPOT", fms),
        "model_implied_Bps": ("model bytes/s", fbw), "gpm_implied_Bps": ("GPM bytes/s", fbw)}))
    t["crossover"] = Table("Crossover: context where the KV read overtakes the weight read",
                           format_columns(a.crossover, {
        "engine_id": ("engine", str), "concurrency": ("batch", fnum),
        "predicted_crossover": ("predicted t*", fnum), "measured_crossover": ("measured t*", fnum),
        "rel_error": ("error", fpct)}),
        note="Measured t* = (intercept − fitted overhead) / slope of step time vs context at that batch.")
    eff = tvm.kv_dtype_effect(a.decode)
    if not eff.empty:
        t["kv_dtype"] = Table("fp8 vs 16-bit KV cache: decode step time, predicted vs measured", format_columns(eff, {
            "max_model_len": ("max len", fnum), "concurrency": ("batch", fnum), "prompt_len": ("prompt", fnum),
            "bytes_ratio": ("bytes read fp8/16", lambda x: f"{x:.3f}"),
            "predicted_step_ratio": ("predicted step fp8/16", lambda x: f"{x:.3f}"),
            "measured_step_ratio": ("measured step fp8/16", lambda x: f"{x:.3f}"), "rel_error": ("error", fpct)}),
            note="Predicted with the fitted model (overhead + bytes/BW_eff), which counts fp8's smaller KV read; "
                 "capacity is on the claims page.")
    t["claims"] = Table("The seeds' claims against the data", format_columns(a.claims, {
        "claim": ("claim", str), "verdict": ("verdict", str), "error": ("error", fpct),
        "tolerance": ("tolerance", lambda x: fpct(x).lstrip("+")), "evidence": ("evidence", str)}))
    t["divergences"] = Table("Largest divergences between theory and measurement",
                             format_columns(a.divergences.head(25), {
        "quantity": ("quantity", str), "where": ("where", str), "predicted": ("predicted", fnum),
        "measured": ("measured", fnum), "rel_error": ("error", fpct)}))
    failed = a.res.points[a.res.points["status"] != "ok"] if not a.res.points.empty else a.res.points
    t["failed"] = Table("Failed points", format_columns(failed, {
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
        lines.append("KV budget on the GPU: vLLM's accounting as kvprof predicts it off by "
                     f"{fpct(cap['kv_budget_rel_error'].median())} "
                     f"(median over engines).")
    f = a.fit
    if f is not None:
        mbu = "; ".join(s for s in (f"MBU {100 * f.mbu_spec:.0f}% of spec" if f.mbu_spec else "",
                                    f"{100 * f.mbu_probe:.0f}% of the probed copy bandwidth" if f.mbu_probe else "")
                        if s)
        lines.append("Decode fit: " + (f"{f.regime.kind}-dominated sweep "
                                       f"({100 * f.regime.overhead_share:.0f}% of the step fixed overhead); "
                                       if f.regime else "")
                     + f"effective bandwidth {fbw(f.effective_bandwidth_Bps)}"
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


def _untested(e: pd.DataFrame) -> str:
    """Names a vLLM release kvprof is not tested with (its driver and log parser may not fit it)."""
    from analysis.results_schema import TESTED_VLLM_VERSIONS

    if "tested_vllm_version" not in e or not (e["tested_vllm_version"] == False).any():  # noqa: E712
        return ""
    return f" (NOT a version kvprof is tested with: {', '.join(TESTED_VLLM_VERSIONS)})"


def setup_lines(a: Analysis) -> list[str]:
    m, e = a.res.manifest, a.res.engines
    first = e.iloc[0] if not e.empty else {}

    def get(k: str) -> Any:
        return first.get(k) if hasattr(first, "get") else None

    started = m.get("started_at")
    when = dt.datetime.fromtimestamp(started, dt.UTC).strftime("%Y-%m-%d %H:%M UTC") if started else "—"
    probe = a.res.probe or {}
    pts = a.res.points
    ok = int((pts["status"] == "ok").sum()) if not pts.empty else 0
    return [
        f"Sweep: {m.get('name')} ({when}, status {m.get('status')})",
        f"Model: {get('model')}  ·  KV dtypes: {', '.join(sorted(map(str, e['kv_cache_dtype'].dropna().unique())))}"
        if not e.empty else "Model: —",
        f"Device: {get('gpu_name') or get('device')}  ·  driver {get('driver') or '—'}  ·  host {m.get('host')}",
        f"vLLM {get('vllm_version')}{_untested(e)}  ·  torch {get('torch_version')}  ·  "
        f"kvprof {m.get('kvprof_version')}",
        f"Engines: {len(e)}  ·  points: {ok} ok of {len(pts)}  ·  engine launches: {m.get('engine_launches')}",
        *_skipped_lines(m),
        *(f"Warning: {w}" for w in a.res.warnings),  # what the load left out (analysis.load), and why
        f"Ceilings: spec {fbw(a.ceilings.spec_bandwidth_Bps)}, probe copy {fbw(a.ceilings.probe_bandwidth_Bps)}, "
        f"probe bf16 matmul {fnum((a.ceilings.probe_flops or float('nan')) / 1e12)} TFLOP/s"
        + (f" ({probe.get('device')})" if probe else ""),
    ]


def _skipped_lines(manifest: dict[str, Any]) -> list[str]:
    """One line per reason whole engines were skipped before the sweep started (the manifest's dropped
    entries that carry an engine), e.g. fp8 KV on a CPU without AVX-512."""
    by_reason: dict[str, list[str]] = {}
    for d in manifest.get("dropped") or []:
        if d.get("engine"):
            by_reason.setdefault(d["reason"], []).append(d["engine"].get("kv_cache_dtype", "?"))
    return [f"Skipped engines: {len(kinds)} ({', '.join(sorted(set(kinds)))} KV) — {reason}"
            for reason, kinds in by_reason.items()]


# --- outputs beside the report ------------------------------------------------------------------

def calibration(a: Analysis) -> dict[str, Any]:
    """calibration.json for `kvprof plan --calibration`: the fitted decode model and the measured reserve."""
    e = a.res.engines.iloc[0]
    cap = a.capacity
    reserve = None
    if "predicted_kv_budget_bytes" in cap and cap["kv_budget_bytes"].notna().any():
        # Measured reserve: what the heuristic predicted plus how far the real budget fell short of it.
        r = cap.dropna(subset=["predicted_kv_budget_bytes"]).iloc[0]
        reserve = int(r["predicted_reserve_bytes"] + r["predicted_kv_budget_bytes"] - r["kv_budget_bytes"])
    probe = a.res.probe or {}
    return calibration_dict(a.fit, device=e.get("gpu_name") or e.get("device"), vllm_version=e.get("vllm_version"),
                            model=e.get("model"), kv_cache_dtype=e.get("kv_cache_dtype"), reserve_bytes=reserve,
                            source=f"kvprof fit of {a.res.root.name} ({a.fit.n} decode points)",
                            model_dtype=e.get("model_dtype"),
                            model_dir=e.get("model_dir"), model_sha256=e.get("requested_model_sha256"),
                            weights=e.get("requested_weights"),
                            device_type=probe.get("device_type") or ("cuda" if a.ceilings.gpu else None),
                            device_memory_bytes=probe.get("memory_total_bytes") or e.get("device_memory_bytes"))


def results_table(a: Analysis) -> pd.DataFrame:
    """One tidy row per point: the record's measurements joined with the theory columns."""
    pts = a.res.points.copy()
    if not a.decode.empty:
        theory = [c for c in a.decode.columns if c not in pts.columns or c == "point_id"]
        pts = pts.merge(a.decode[theory], on="point_id", how="left")
    for col in pts.columns:  # parquet needs one type per column
        if pts[col].dtype == object:
            pts[col] = pts[col].map(lambda v: v if v is None or isinstance(v, str) else str(v))
    return pts
